"""Shared pieces of the reliability tests: a tiny classification config (the demo's, on a
folder the test writes) and mmengine's global state isolated for runs inside the test."""
import pytest

from tests.conftest import ROOT
from tests.dense.conftest import ade_root, coco_root  # noqa: F401
from tests.tools.conftest import isolated_mmengine, run_log, scalars  # noqa: F401

TINY_CLS = """
_base_ = '{root}/configs/demo/finetune_tiny_cls.py'
train_dataloader = dict(batch_size=4, dataset=dict(data_root='{data}'))
val_dataloader = dict(dataset=dict(data_root='{data}'))
test_dataloader = val_dataloader
optim_wrapper = dict(optimizer=dict(lr={lr}))
param_scheduler = []
train_cfg = dict(max_iters={iters}, val_interval=1000)
default_hooks = dict(checkpoint=dict(interval={interval}, max_keep_ckpts={keep}))
randomness = dict(seed=0)
"""


def write_cls(path, data, iters=4, interval=2, keep=1, lr=2e-3, extra=''):
    path.write_text(TINY_CLS.format(root=ROOT, data=data, iters=iters, interval=interval,
                                    keep=keep, lr=lr) + extra)
    return path


@pytest.fixture
def cls_data(tmp_path):
    from peco_mm.tooling.demo_data import make_class_folder
    make_class_folder(tmp_path / 'data' / 'train', per_class=4)
    make_class_folder(tmp_path / 'data' / 'val', seed=1, per_class=2)
    return tmp_path / 'data'
