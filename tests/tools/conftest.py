"""Shared pieces of the launcher tests: tiny configs on top of the shipped demo configs, the tools
loaded as modules, an isolated mmengine state for runs inside the test process, and process
trees to stop."""
import os
import signal
import socket

import pytest

from tests.conftest import (ROOT, load_tool, mmengine_instances_dropped, run_log,  # noqa: F401
                            scalars)  # (re-exported)

TINY_CLS = """
_base_ = '{root}/configs/demo/finetune_tiny_cls.py'
train_dataloader = dict(dataset=dict(data_root='{data}'))
val_dataloader = dict(dataset=dict(data_root='{data}'))
test_dataloader = val_dataloader
param_scheduler = []  # a constant lr, so the logged lr is the optimizer's lr
train_cfg = dict(max_iters={iters}, val_interval={iters})
default_hooks = dict(checkpoint=dict(interval={iters}))
randomness = dict(seed=0)
"""
# the demo's PeCo pretraining config (configs/demo/pretrain_tiny_photos.py) on a folder the test
# writes, with a tokenizer checkpoint from tools/train.py (see `tiny_peco`): 4 images per step
TINY_PECO = """
_base_ = '{root}/configs/demo/pretrain_tiny_photos.py'
model = dict(target_generator=dict(checkpoint='{tokenizer}'))
train_dataloader = dict(batch_size=4, dataset=dict(data_root='{data}'))
param_scheduler = []
train_cfg = dict(max_iters={iters})
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval={iters}))
"""


def write(path, template, **kw):
    path.write_text(template.format(root=ROOT, **kw))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def process_tree(pid: int) -> list[int]:
    """pid and all its descendants (torchrun puts its workers in their own sessions, so a
    process group does not reach them)."""
    out = [pid]
    try:
        for task in os.listdir(f'/proc/{pid}/task'):
            with open(f'/proc/{pid}/task/{task}/children') as f:
                for child in f.read().split():
                    out += process_tree(int(child))
    except FileNotFoundError:  # already gone
        pass
    return out


def signal_tree(pids, sig=signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


@pytest.fixture
def isolated_mmengine():
    """mmengine's global instances made by a test's in-process runs dropped afterwards."""
    with mmengine_instances_dropped():
        yield


@pytest.fixture(scope='module')
def tiny_peco_parts(tmp_path_factory):
    """(data root, tokenizer checkpoint): 64 px images and a demo-architecture tokenizer that
    tools/train.py trained for one step (pixel loss only, no perceptual network)."""
    from peco_mm.tooling.demo_data import make_class_folder
    tmp = tmp_path_factory.mktemp('peco')
    make_class_folder(tmp / 'data' / 'train', size=64, per_class=4)
    from tests.conftest import run_tool
    run_tool(['tools/train.py', ROOT / 'configs/demo/tokenizer_tiny_photos.py',
              '--work-dir', tmp / 'tok', '--cfg-options', 'model.perceptual_weight=0.0',
              'model.perceptual=None', f'train_dataloader.dataset.data_root={tmp / "data"}',
              'train_dataloader.batch_size=4', 'train_cfg.max_iters=1', 'custom_hooks=[]',
              'default_hooks.checkpoint.interval=1', 'param_scheduler=[]'])
    return tmp / 'data', tmp / 'tok' / 'iter_1.pth'
