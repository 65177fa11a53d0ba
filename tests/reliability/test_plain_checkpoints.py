"""Every checkpoint the launcher writes is plain data: the hosts' own loaders read it in a
process where peco_mm cannot be imported, a resumed run continues bit for bit as an
uninterrupted one, and tools/plain_checkpoint.py rewrites a checkpoint of the older form."""
import json
import os
import re
import subprocess
import sys

import pytest
import torch

from tests.checkpoint_forms import save_old_form
from tests.conftest import ROOT, run_tool
from tests.reliability.conftest import scalars, write_cls
from tests.reliability.host_runs import train_host_runs

# The user's own process: peco_mm cannot be imported (an entry of None in sys.modules makes
# `import peco_mm` raise ImportError), the checkout is not on the path. mmcv-lite's missing
# compiled ops (`mmcv._ext`, which mmdet and mmseg import) still come from the start-up hook
# an install of peco_mm leaves in site-packages, which loads one file of peco_mm/ops by its
# path and imports nothing of peco_mm.
HOST_LOADERS = r'''
import json, sys
sys.modules['peco_mm'] = None
try:
    import peco_mm
    print('peco_mm importable')
except ImportError:
    print('peco_mm blocked')
import numpy as np
import torch
from mmengine.runner import load_checkpoint
runs = json.loads(sys.argv[1])
img = np.random.default_rng(0).integers(0, 255, (64, 96, 3), dtype=np.uint8)


def same_weights(model, ckpt):
    saved = torch.load(ckpt, weights_only=True)['state_dict']  # no allow-list at all
    own = model.state_dict()
    return all(torch.equal(own[k].cpu(), v) for k, v in saved.items())


# first: mmdet's and mmseg's loaders set their scope as the default
from mmpretrain import ImageClassificationInferencer
cfg, ckpt = runs['classifier']
inferencer = ImageClassificationInferencer(model=cfg, pretrained=ckpt, device='cpu')
print('inferencer', same_weights(inferencer.model, ckpt), len(inferencer(img)[0]['pred_scores']))

from mmdet.apis import inference_detector, init_detector
cfg, ckpt = runs['mask_rcnn']
model = init_detector(cfg, ckpt, device='cpu')
print('init_detector', same_weights(model, ckpt), type(inference_detector(model, img)).__name__)
load_checkpoint(model, ckpt, map_location='cpu')
print('load_checkpoint', same_weights(model, ckpt))

from mmseg.apis import inference_model, init_model
cfg, ckpt = runs['upernet']
model = init_model(cfg, ckpt, device='cpu')
print('init_model', same_weights(model, ckpt), type(inference_model(model, img)).__name__)

print('peco_mm modules', [m for m in sys.modules if m == 'peco_mm' or m.startswith('peco_mm.')
                          if sys.modules[m] is not None])
'''


@pytest.fixture(scope='module')
def host_runs(tmp_path_factory):
    return train_host_runs(tmp_path_factory.mktemp('host_runs'))


def test_hosts_load_the_launchers_checkpoints_without_peco_mm(host_runs, tmp_path):
    """mmdet's init_detector (and mmengine's load_checkpoint), mmseg's init_model and an
    mmpretrain inferencer load a Mask R-CNN, an UperNet and a classifier checkpoint that
    tools/train.py wrote, in a process that never imports peco_mm, and run them."""
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    runs = {name: [str(cfg), str(ckpt)] for name, (cfg, ckpt) in host_runs.items()}
    proc = subprocess.run([sys.executable, '-c', HOST_LOADERS, json.dumps(runs)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # mmpretrain's inferencer may end a progress bar without a newline before the next print
    stdout = re.sub(r'Inference [━ ]*\d+% [\d:]+', '', proc.stdout)
    lines = [ln for ln in stdout.splitlines() if not ln.startswith('Loads checkpoint')]
    assert lines == [
        'peco_mm blocked', 'inferencer True 3', 'init_detector True DetDataSample',
        'load_checkpoint True', 'init_model True SegDataSample', 'peco_mm modules []'], proc.stdout


def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path, cls_data, isolated_mmengine):
    """2 iterations, then a resume to 4, give the losses, the weights and the message hub's
    logged history of 4 uninterrupted iterations, bit for bit; every checkpoint loads with
    torch.load(weights_only=True) and records one run id for the lineage. (Without drop
    path: mmengine's resume restores no random state, and the data the resumed loop skips
    replays the pipeline's draws, not the model's.)"""
    from peco_mm.supervisor.launch import run
    cfg = write_cls(tmp_path / 'cls.py', cls_data, iters=4, interval=2, keep=3,
                    extra='model = dict(backbone=dict(drop_path_rate=0.0))\n')
    whole, parts = tmp_path / 'whole', tmp_path / 'parts'
    run(str(cfg), str(whole))
    run(str(cfg), str(parts), {'train_cfg.max_iters': 2})
    run(str(cfg), str(parts), resume='auto')
    loss = {w: [(r['iter'], r['loss']) for r in scalars(w) if 'loss' in r] for w in (whole, parts)}
    assert [i for i, _ in loss[parts]] == [3, 4] and loss[parts] == loss[whole][2:]
    a, b = (torch.load(w / 'iter_4.pth', weights_only=True) for w in (whole, parts))
    for key, value in a['state_dict'].items():
        assert torch.equal(value, b['state_dict'][key]), key
    for key in ('train/loss', 'train/lr'):
        hist_a, hist_b = (c['message_hub']['log_scalars'][key] for c in (a, b))
        assert len(hist_a['log_history']) == 4
        assert all(torch.equal(hist_a[k], hist_b[k]) for k in ('log_history', 'count_history'))
    first = torch.load(parts / 'iter_2.pth', weights_only=True)['meta']['run_id']
    assert b['meta']['run_id'] == first != a['meta']['run_id']


def test_plain_checkpoint_tool_rewrites_an_old_checkpoint(tmp_path, monkeypatch):
    """A checkpoint of the older form (HistoryBuffers in its message hub) is refused by a
    plain weights-only torch.load; peco_mm's reader says which command rewrites it; the tool
    rewrites it in place, after which it loads with no allow-list and resumes with the
    same history."""
    import pickle

    import numpy as np
    from mmengine.logging import MessageHub

    from peco_mm.checkpoint import load_from_weights_only, mmengine_loaders
    from peco_mm.checkpoint.plain import history_buffers_restored
    hub = MessageHub('test_plain_checkpoint_tool')
    for value in (2.0, 1.5, 1.25):
        hub.update_scalar('train/loss', value)
    hub.update_info('eta', np.float64(4.5))
    old = tmp_path / 'iter_3.pth'
    save_old_form(old, hub, state_dict={'w': torch.arange(4.0)}, meta={'iter': 3})
    with pytest.raises(pickle.UnpicklingError, match='HistoryBuffer'):
        torch.load(old, weights_only=True)
    logged = []
    monkeypatch.setattr(mmengine_loaders, 'log', logged.append)
    load_from_weights_only(str(old))
    assert f'rewrite it once with: python tools/plain_checkpoint.py {old}' in ''.join(logged)
    out = run_tool(['tools/plain_checkpoint.py', tmp_path])
    assert out.stdout.splitlines() == [f'{old}: rewritten as plain data -> {old}']
    ckpt = torch.load(old, weights_only=True)
    assert torch.equal(ckpt['state_dict']['w'], torch.arange(4.0))
    assert ckpt['message_hub']['runtime_info']['eta'] == 4.5
    history_buffers_restored(ckpt['message_hub'])
    buf = ckpt['message_hub']['log_scalars']['train/loss']
    assert buf.data[0].tolist() == [2.0, 1.5, 1.25] and buf.current() == 1.25
    again = run_tool(['tools/plain_checkpoint.py', old])
    assert again.stdout.strip() == f'{old}: already plain data, left as it is'
    bad = run_tool(['tools/plain_checkpoint.py', tmp_path / 'nowhere.pth'], check=False)
    assert bad.returncode == 1 and bad.stderr.strip() == (
        f'plain_checkpoint: error: checkpoint not found: {tmp_path / "nowhere.pth"}')


def test_an_export_reads_the_metrics_of_a_plain_message_hub():
    """The model card's metrics come from the message hub's last val/ values, in either form
    of its buffers."""
    from mmengine.logging import MessageHub

    from peco_mm.checkpoint.plain import plain_checkpoint
    from peco_mm.tooling.export.source import _hub_metrics
    hub = MessageHub('test_plain_hub_metrics')
    for value in (50.0, 62.5):
        hub.update_scalar('val/accuracy/top1', value)
    hub.update_scalar('train/loss', 1.0)
    assert _hub_metrics(hub.state_dict()) == {'accuracy/top1': 62.5}
    plain = plain_checkpoint({'message_hub': hub.state_dict()})['message_hub']
    assert _hub_metrics(plain) == {'accuracy/top1': 62.5}


def test_a_malformed_plain_buffer_is_named():
    from peco_mm.checkpoint.plain import history_buffers_restored
    hub = {'log_scalars': {'train/loss': {'log_history': [1.0], 'count_history': [1],
                                          'max_length': 10}}}
    with pytest.raises(ValueError, match=r'^message_hub.log_scalars.train/loss: expected '
                                         r'log_history and count_history as 1-d tensors'):
        history_buffers_restored(hub)
