"""What the launcher does to a config, in one list (peco_mm.supervisor.config_steps): every key it
changes is listed with before, after and why, in the run's log and by --show-config; SyncBN
becomes BN without CUDA; the console stays quiet (the base lr as `lr`, no SyncBN line, no
"training" in a test run, no pycocotools progress); `--preflight-only` runs every check."""
import re
import warnings

import pytest
from mmengine.config import Config

from tests.conftest import run_tool
from tests.dense.conftest import ade_root  # noqa: F401 (a fixture)
from tests.tools.conftest import TINY_CLS, free_port, run_log, scalars, write


@pytest.fixture
def cls_cfg(tmp_path, image_folder):
    return write(tmp_path / 'tiny_cls.py', TINY_CLS, data=image_folder, iters=2)


@pytest.fixture
def no_native_bf16(monkeypatch):
    from peco_mm.utils import precision
    monkeypatch.setattr(precision, 'cpu_has_native_bf16', lambda: False)


# ---- the list --------------------------------------------------------------------------------
def test_the_steps_list_every_key_they_change(cls_cfg, tmp_path, no_native_bf16):
    from peco_mm.supervisor.changes import ABSENT
    from peco_mm.supervisor.launch import plan
    user = Config.fromfile(str(cls_cfg))
    cfg, changes = plan(str(cls_cfg), str(tmp_path / 'work'), None, 'train', cuda=False)
    dataset = user.train_dataloader.dataset.to_dict()
    assert [(c.key, c.before, c.after) for c in changes] == [
        ('work_dir', ABSENT, str(tmp_path / 'work')),
        ('optim_wrapper.type', 'AmpOptimWrapper', 'OptimWrapper'),  # no CUDA, no native bf16
        ('optim_wrapper.dtype', 'bfloat16', ABSENT),
        ('train_dataloader.dataset', dataset, {'type': 'BadSampleGuard', 'dataset': dataset}),
        ('optim_wrapper.type', 'OptimWrapper', 'NonFiniteGuardOptimWrapper'),
        ('default_hooks.checkpoint.type', 'CheckpointHook', 'AtomicCheckpointHook'),
        ('custom_hooks.0', ABSENT, {'type': 'NonFiniteLossHook'}),
        ('custom_hooks.1', ABSENT, {'type': 'ArchitectureMetaHook'}),
    ]
    assert cfg.optim_wrapper.type == 'NonFiniteGuardOptimWrapper'  # what the run builds
    whys = {c.key: c.why for c in changes}
    assert 'fp32, this CPU has no native bf16' in changes[1].why
    assert whys['default_hooks.checkpoint.type'].startswith('each checkpoint is written to')
    assert changes[3].line().startswith(
        "train_dataloader.dataset: CustomDataset(data_prefix='train', pipeline=[")
    assert changes[3].line().split(' -> ')[1].startswith('BadSampleGuard(dataset=<as before>)')
    assert not (tmp_path / 'work').exists()  # a plan takes no lock, writes nothing


def test_without_cuda_syncbn_becomes_bn_and_nccl_gloo_each_listed(tmp_path):
    from peco_mm.supervisor.launch import plan
    user = Config(dict(
        default_scope='mmseg', sync_bn='torch', env_cfg=dict(dist_cfg=dict(backend='nccl')),
        model=dict(type='EncoderDecoder',
                   backbone=dict(type='PeCoViT', pyramid=dict(norm_cfg=dict(type='SyncBN'))),
                   decode_head=dict(type='UPerHead',
                                    norm_cfg=dict(type='SyncBN', requires_grad=True)))))
    for launcher in ('pytorch', 'none'):
        cfg, changes = plan(user, str(tmp_path), None, 'test', skip=('pre-flight',),
                            checkpoint='w.pth', launcher=launcher, cuda=False)
        found = {c.key: (c.before, c.after, c.why) for c in changes}
        assert found['model.backbone.pyramid.norm_cfg.type'][:2] == ('SyncBN', 'BN')
        assert found['model.decode_head.norm_cfg.type'][:2] == ('SyncBN', 'BN')
        assert found['env_cfg.dist_cfg.backend'][:2] == ('nccl', 'gloo')
        assert cfg.model.decode_head.norm_cfg == dict(type='BN', requires_grad=True)
        if launcher == 'pytorch':
            assert found['sync_bn'][:2] == ('torch', None)
            assert 'DDP refuses it on CPU processes' in found['model.decode_head.norm_cfg.type'][2]
        else:  # one process: mmengine converts nothing, sync_bn stays
            assert 'sync_bn' not in found and cfg.sync_bn == 'torch'
    _, with_cuda = plan(user, str(tmp_path), None, 'test', skip=('pre-flight',),
                        checkpoint='w.pth', cuda=True)
    assert [c.key for c in with_cuda] == ['work_dir', 'load_from']


# ---- a run: the log, the console -------------------------------------------------------------
def test_a_run_logs_its_changes_and_the_base_lr_and_a_test_run_says_no_training(
        cls_cfg, tmp_path, capsys, isolated_mmengine, no_native_bf16):
    from peco_mm.supervisor.launch import plan, run
    _, changes = plan(str(cls_cfg), str(tmp_path / 'work'), None, 'train', cuda=False)
    runner = run(str(cls_cfg), str(tmp_path / 'work'), None, 'train').runner
    out = capsys.readouterr().out
    log = run_log(tmp_path / 'work')
    lines = [c.line() for c in changes]
    # the run may change more than the plan shows: the plan leaves out the steps that act on
    # the machine (allocator, lock, process group), whose changes depend on the process state
    n = int(re.search(r'The launcher changed (\d+) keys of this config', log).group(1))
    assert n >= len(lines) and all(f'  {line}\n' in log for line in lines)
    assert lines[0] not in out  # the console: one line pointing at the log
    assert f'Config, hook order and the {n} keys the launcher changed: in ' in out
    assert 'SyncBatchNorm' not in out and 'SyncBatchNorm' in log  # mmengine's, every run
    # the logged lr is the config's (the head's group), not the lowest layer's (0.65^3 of it)
    groups = runner.optim_wrapper.optimizer.param_groups
    assert len({g['lr'] for g in groups}) > 1
    assert [r['lr'] for r in scalars(tmp_path / 'work') if 'lr' in r] == [2e-3, 2e-3]
    assert runner.optim_wrapper.get_lr()['lr'][0] == 2e-3
    assert sorted(runner.optim_wrapper.get_lr()['lr']) == sorted(g['lr'] for g in groups)
    run(str(cls_cfg), str(tmp_path / 'test'), {'optim_wrapper.type': 'AmpOptimWrapper'},
        'test', checkpoint=str(tmp_path / 'work' / 'iter_2.pth'))
    out = capsys.readouterr().out
    assert 'accuracy/top1' in out and 'training' not in out.lower()


def test_show_config_prints_the_changes_on_the_console(cls_cfg, tmp_path, capsys,
                                                      isolated_mmengine):
    from peco_mm.supervisor.launch import run
    run(str(cls_cfg), str(tmp_path / 'work'), {'train_cfg.max_iters': 1}, 'train',
        show_config=True)
    out = capsys.readouterr().out
    assert 'The launcher changed ' in out
    assert "  default_hooks.checkpoint.type: 'CheckpointHook' -> 'AtomicCheckpointHook' (" in out


# ---- console noise ---------------------------------------------------------------------------
def test_pycocotools_progress_lines_are_dropped_and_the_rest_passes(tmp_path, capsys):
    import json

    from pycocotools.coco import COCO

    from peco_mm.supervisor.console import quiet_stdout
    ann = tmp_path / 'ann.json'
    ann.write_text(json.dumps(dict(images=[dict(id=1, width=8, height=8, file_name='a.jpg')],
                                   annotations=[], categories=[dict(id=1, name='box')])))
    with quiet_stdout():
        print('Iter(val) [1/1]', flush=True)
        coco = COCO(str(ann))
        print('mAP: 0.5', end='')
        print()
    out = capsys.readouterr().out
    assert coco.getImgIds() == [1]
    assert out == 'Iter(val) [1/1]\nmAP: 0.5\n'


def test_warnings_only_on_rank_zero_and_none_about_host_internals(monkeypatch):
    from peco_mm.supervisor.console import quiet_ranks
    for rank, launcher, shown in (('1', 'pytorch', 0), ('0', 'pytorch', 1), ('1', 'none', 1)):
        monkeypatch.setenv('RANK', rank)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter('always')
            quiet_ranks(launcher)
            warnings.warn('torch says so', UserWarning)
            warnings.warn('``build_loss`` would be deprecated soon, please use ...', UserWarning)
        assert [str(w.message) for w in seen] == ['torch says so'] * shown, (rank, launcher)


# ---- SyncBN on CPU processes -----------------------------------------------------------------
SEG = """
_base_ = '{root}/configs/demo/upernet_tiny_shapes.py'
data_root = '{data}'
norm = dict(type='SyncBN', requires_grad=True)  # as mmseg's own configs
model = dict(backbone=dict(init_cfg=None, pyramid=dict(norm_cfg=norm)),
             decode_head=dict(norm_cfg=norm), auxiliary_head=dict(norm_cfg=norm))
train_dataloader = dict(batch_size=2, dataset=dict(data_root=data_root))
val_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = val_dataloader
train_cfg = dict(max_iters=1)
default_hooks = dict(checkpoint=dict(interval=1))
"""


def test_syncbn_config_trains_under_a_cpu_process_group(tmp_path, ade_root):
    """torch's DDP refuses SyncBatchNorm on CPU ('SyncBatchNorm layers only work with GPU
    modules'): the launcher turns it into BN and lists it, with no UserWarning."""
    import torch
    if torch.cuda.is_available():
        pytest.skip('the CPU path')
    cfg = write(tmp_path / 'seg.py', SEG, data=ade_root)
    env = dict(RANK='0', LOCAL_RANK='0', WORLD_SIZE='1', LOCAL_WORLD_SIZE='1',
               MASTER_ADDR='127.0.0.1', MASTER_PORT=str(free_port()))
    proc = run_tool(['tools/train.py', cfg, '--work-dir', tmp_path / 'work', '--launcher',
                     'pytorch', '--no-validate'], env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / 'work' / 'iter_1.pth').is_file()
    assert 'sync_bn' not in proc.stderr and 'SyncBatchNorm' not in proc.stdout
    from peco_mm.supervisor.console import HOST_INTERNALS
    assert not [t for t in HOST_INTERNALS if t in proc.stderr], proc.stderr
    log = run_log(tmp_path / 'work')
    assert ("  model.decode_head.norm_cfg.type: 'SyncBN' -> 'BN' (no CUDA: SyncBN needs it "
            '(DDP refuses it on CPU processes)') in log
    assert "  sync_bn: 'torch' -> None (" in log


# ---- --preflight-only ------------------------------------------------------------------------
def test_preflight_only_runs_every_check_and_says_so(cls_cfg, tmp_path):
    args = ['tools/train.py', cls_cfg, '--work-dir', tmp_path / 'work', '--preflight-only']
    typo = run_tool(args + ['--cfg-options', 'optim_wrapper.optimizer.lrr=1'], check=False)
    assert typo.returncode == 1 and 'Traceback' not in typo.stderr
    assert ('optim_wrapper.optimizer.lrr: unknown key for AdamW; did you mean '
            'optim_wrapper.optimizer.lr?') in typo.stderr
    ok = run_tool(args)
    assert ok.stdout.startswith(f'train.py: pre-flight of {cls_cfg} passed: every checkpoint '
                                'and dataset it reads is in place and every key is known; '
                                'the launcher changes ')
    assert 'Nothing was started.' in ok.stdout and not (tmp_path / 'work').exists()
    shown = run_tool(args + ['--show-config'])
    assert "  default_hooks.checkpoint.type: 'CheckpointHook' -> 'AtomicCheckpointHook'" in (
        shown.stdout)
