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
def tiny_dense(demo: str, data_root: str, length: str, log_interval: int, extra: str = '') -> str:
    """The test config of a demo's dense toy (`{length}`: iters or epochs; `extra`: lines of
    its own), with the placeholders write_cfg fills: {root}, {data}, {lr} and {<length>}."""
    return (f"\n_base_ = '{{root}}/configs/demo/{demo}.py'\n"
            # 16 px patches: the paper's pyramid layout (strides 4/8/16/32)
            'model = dict(backbone=dict(init_cfg=None, num_heads=2, patch_size=16, '
            'pyramid=dict(scales=(4, 2, 1, 0.5))))\n'
            f"train_dataloader = dict(batch_size=2, dataset=dict(data_root='{data_root}'))\n"
            f"val_dataloader = dict(dataset=dict(data_root='{data_root}'))\n"
            'test_dataloader = val_dataloader\n' + extra +
            'optim_wrapper = dict(optimizer=dict(lr={lr}))\n'
            f'train_cfg = dict(max_{length}={{{length}}}, val_interval={{{length}}})\n'
            f'default_hooks = dict(logger=dict(interval={log_interval}), '
            f'checkpoint=dict(interval={{{length}}}))\n')


TINY_UPERNET = tiny_dense('upernet_tiny_shapes', '{data}', 'iters', 5)
TINY_MASK_RCNN = tiny_dense(
    'mask_rcnn_tiny_shapes', '{data}/', 'epochs', 1,
    extra="val_evaluator = dict(ann_file='{data}/annotations/instances_val2017.json')\n"
          'test_evaluator = val_evaluator\n')


def write_cfg(path: Path, template: str, **kw) -> Path:
    path.write_text(template.format(root=ROOT, **kw))
    return path


@pytest.fixture
def ade_root(tmp_path):
    return make_ade(tmp_path / 'ade')


@pytest.fixture
def coco_root(tmp_path):
    return make_coco(tmp_path / 'coco')
