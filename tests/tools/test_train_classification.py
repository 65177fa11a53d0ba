"""End to end through the launchers on an image folder the test writes: train a tiny PeCoViT
classifier with the shipped fine-tuning config, kill it, resume it, and run it on 2 CPU
processes with gloo."""
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.conftest import ROOT, run_tool, scalars

from peco_mm.checkpoint import read_checkpoint

TINY_CFG = """
_base_ = '{root}/configs/demo/finetune_tiny_cls.py'
data_root = '{data}'
train_dataloader = dict(dataset=dict(data_root=data_root))
val_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = val_dataloader
max_iters = {iters}
param_scheduler = [dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=5),
                   dict(type='CosineAnnealingLR', by_epoch=False, begin=5, end=max_iters)]
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
"""


def write_cfg(tmp_path, data, iters):
    cfg = tmp_path / f'tiny_cls_{iters}.py'
    cfg.write_text(TINY_CFG.format(root=ROOT, data=data, iters=iters))
    return cfg


def test_train_learns_then_test_tool(tmp_path, image_folder):
    cfg = write_cfg(tmp_path, image_folder, iters=40)
    wd = tmp_path / 'wd'
    run_tool(['tools/train.py', cfg, '--work-dir', wd])
    recs = scalars(wd)
    losses = [r['loss'] for r in recs if 'loss' in r]
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5, losses
    acc = [r['accuracy/top1'] for r in recs if 'accuracy/top1' in r][-1]
    assert acc > 100 / 3 + 10, acc  # above chance on held-out images
    proc = run_tool(['tools/test.py', cfg, wd / 'iter_40.pth', '--work-dir', tmp_path / 't'])
    m = re.search(r'accuracy/top1: ([\d.]+)', proc.stdout + proc.stderr)
    assert m and abs(float(m.group(1)) - acc) < 1e-3


def test_killed_run_resumes_from_last_checkpoint(tmp_path, image_folder):
    cfg = write_cfg(tmp_path, image_folder, iters=60)
    wd = tmp_path / 'wd'
    env = dict(PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1')
    proc = subprocess.Popen([sys.executable, 'tools/train.py', str(cfg), '--work-dir', str(wd)],
                            cwd=ROOT, env={**__import__('os').environ, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (wd / 'iter_8.pth').exists() and time.time() < deadline:
        time.sleep(0.2)
        assert proc.poll() is None, 'training ended before it could be killed'
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ckpts = sorted(int(p.stem.split('_')[1]) for p in wd.glob('iter_*.pth'))
    last = ckpts[-1]
    assert 8 <= last < 60
    out = run_tool(['tools/train.py', cfg, '--work-dir', wd, '--resume'])
    log = out.stdout + out.stderr
    assert 'resumed' in log.lower() and f'iter_{last}.pth' in log
    assert (wd / 'iter_60.pth').exists()
    # the resumed run continued at last+1 instead of starting over
    it = [r['iter'] for r in scalars(wd) if 'loss' in r]
    assert it[0] == last + 1 and it[-1] == 60
    import peco_mm  # noqa: F401  (allow-lists mmengine's checkpoint types)
    state = read_checkpoint(wd / 'iter_60.pth', map_location='cpu')
    assert state['meta']['iter'] == 60


def test_resume_refuses_arbitrary_pickles(tmp_path):
    from mmengine.runner.checkpoint import _load_checkpoint

    from peco_mm.checkpoint import checkpoints_through_gate
    path = tmp_path / 'evil.pth'
    torch.save({'state_dict': {}, 'meta': {'obj': subprocess.Popen}}, path)
    with checkpoints_through_gate(), pytest.raises(
            ValueError, match='evil.pth holds pickled Python objects .*Popen'):
        _load_checkpoint(str(path), map_location='cpu')


@pytest.mark.slow
def test_missing_dataset_names_path_and_layout(tmp_path):
    cfg = write_cfg(tmp_path, tmp_path / 'nowhere', iters=4)
    out = run_tool(['tools/train.py', cfg, '--work-dir', tmp_path / 'wd'], check=False)
    assert out.returncode != 0
    assert f"data_root '{tmp_path / 'nowhere'}' does not exist" in out.stderr
    assert 'Expected layout' in out.stderr


def test_missing_pretrained_checkpoint_names_the_key(tmp_path, image_folder):
    cfg = write_cfg(tmp_path, image_folder, iters=8)
    cfg.write_text(cfg.read_text() + f"model = dict(backbone=dict(init_cfg=dict(_delete_=True, "
                   f"type='Pretrained', checkpoint='{tmp_path}/nope.pth')))\n")
    out = run_tool(['tools/train.py', cfg, '--work-dir', tmp_path / 'wd'], check=False)
    assert out.returncode != 0
    assert f"model.backbone.init_cfg.checkpoint='{tmp_path}/nope.pth' not found" in out.stderr
