"""Synthetic ADE20K- and COCO-format datasets and tiny configs for the dense tests.

The images are learnable on purpose: each object is a flat, class-coloured shape on a noisy
gray background, so a few dozen iterations of a tiny model already score above chance.
"""
from pathlib import Path

import pytest

from tests.conftest import ROOT

# the generators live in peco_mm.utils (make demo uses them too); class k is COLOURS[k - 1]
from peco_mm.tooling.demo_data import COCO_CATS, COLOURS, make_ade, make_coco  # noqa: E402,F401


# The tests run the demo's toy configs (configs/demo/*_tiny_shapes.py: width 64, 4 blocks
# feeding the pyramid, small heads; themselves children of the shipped configs) from scratch
# on the data each test writes, with the test's own schedule (2 heads, 16 px patches:
# the seeded runs these tests were tuned on).
TINY_UPERNET = """
_base_ = '{root}/configs/demo/upernet_tiny_shapes.py'
model = dict(backbone=dict(init_cfg=None, num_heads=2, patch_size=16))
train_dataloader = dict(batch_size=2, dataset=dict(data_root='{data}'))
val_dataloader = dict(dataset=dict(data_root='{data}'))
test_dataloader = val_dataloader
optim_wrapper = dict(optimizer=dict(lr={lr}))
train_cfg = dict(max_iters={iters}, val_interval={iters})
default_hooks = dict(logger=dict(interval=5), checkpoint=dict(interval={iters}))
"""

TINY_MASK_RCNN = """
_base_ = '{root}/configs/demo/mask_rcnn_tiny_shapes.py'
model = dict(backbone=dict(init_cfg=None, num_heads=2, patch_size=16))
train_dataloader = dict(batch_size=2, dataset=dict(data_root='{data}/'))
val_dataloader = dict(dataset=dict(data_root='{data}/'))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file='{data}/annotations/instances_val2017.json')
test_evaluator = val_evaluator
optim_wrapper = dict(optimizer=dict(lr={lr}))
train_cfg = dict(max_epochs={epochs}, val_interval={epochs})
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval={epochs}))
"""


def write_cfg(path: Path, template: str, **kw) -> Path:
    path.write_text(template.format(root=ROOT, **kw))
    return path


@pytest.fixture
def ade_root(tmp_path):
    return make_ade(tmp_path / 'ade')


@pytest.fixture
def coco_root(tmp_path):
    return make_coco(tmp_path / 'coco')
