"""Synthetic ADE20K- and COCO-format datasets and tiny configs for the dense tests.

The images are learnable on purpose: each object is a flat, class-coloured shape on a noisy
gray background, so a few dozen iterations of a tiny model already score above chance.
"""
from pathlib import Path

import pytest

from tests.conftest import ROOT

# the generators live in peco_mm.utils (make demo uses them too); class k is COLOURS[k - 1]
from peco_mm.utils.demo_data import COCO_CATS, COLOURS, make_ade, make_coco  # noqa: E402,F401


# Tiny children of the shipped configs: width 64, depth 4 (so blocks 1/2/3/4 feed the
# pyramid), 64x64 crops; the rest (heads, losses, optimizer, schedule shape) is shipped.
TINY_VIT = ("arch=dict(_delete_=True, embed_dims=64, num_layers=4, num_heads=2), "
            "init_cfg=None, drop_path_rate=0.0")

TINY_UPERNET = """
_base_ = '{root}/configs/peco/upernet_vitb_ade20k.py'
crop = (64, 64)
model = dict(
    data_preprocessor=dict(size=crop),
    backbone=dict({vit}, img_size=crop),
    decode_head=dict(in_channels=[64] * 4, channels=32, pool_scales=(1, 2)),
    auxiliary_head=dict(in_channels=64, channels=16),
    test_cfg=dict(crop_size=crop, stride=(48, 48)))
train_pipeline = [
    dict(p, scale=(96, 64)) if p['type'] == 'RandomResize' else
    dict(p, crop_size=crop) if p['type'] == 'RandomCrop' else p
    for p in _base_.train_pipeline if p['type'] != 'PhotoMetricDistortion']
test_pipeline = [dict(p, scale=(96, 64)) if p['type'] == 'Resize' else p
                 for p in _base_.test_pipeline]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root='{data}', pipeline=train_pipeline))
val_dataloader = dict(num_workers=0, persistent_workers=False,
                      dataset=dict(data_root='{data}', pipeline=test_pipeline))
test_dataloader = val_dataloader
optim_wrapper = dict(optimizer=dict(lr={lr}))
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=False)]
train_cfg = dict(max_iters={iters}, val_interval={iters})
default_hooks = dict(logger=dict(interval=5), checkpoint=dict(interval={iters}),
                     visualization=dict(draw=False))
env_cfg = dict(cudnn_benchmark=False)
"""

TINY_MASK_RCNN = """
_base_ = '{root}/configs/peco/mask_rcnn_vitb_coco.py'
model = dict(
    backbone=dict({vit}, img_size=64),
    neck=dict(in_channels=[64] * 4, out_channels=32),
    rpn_head=dict(in_channels=32, feat_channels=32),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=32),
        bbox_head=dict(in_channels=32, fc_out_channels=64),
        mask_roi_extractor=dict(out_channels=32),
        mask_head=dict(in_channels=32, conv_out_channels=32)),
    train_cfg=dict(rpn_proposal=dict(nms_pre=200, max_per_img=100),
                   rcnn=dict(sampler=dict(num=64))),
    test_cfg=dict(rpn=dict(nms_pre=200, max_per_img=100)))
train_pipeline = [dict(p, scale=(128, 96)) if p['type'] == 'Resize' else p
                  for p in _base_.train_pipeline]
test_pipeline = [dict(p, scale=(128, 96)) if p['type'] == 'Resize' else p
                 for p in _base_.test_pipeline]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root='{data}/', pipeline=train_pipeline))
val_dataloader = dict(num_workers=0, persistent_workers=False,
                      dataset=dict(data_root='{data}/', pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file='{data}/annotations/instances_val2017.json')
test_evaluator = val_evaluator
optim_wrapper = dict(optimizer=dict(lr={lr}))
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=False)]
train_cfg = dict(max_epochs={epochs}, val_interval={epochs})
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval={epochs}),
                     visualization=dict(draw=False))
"""


def write_cfg(path: Path, template: str, **kw) -> Path:
    path.write_text(template.format(root=ROOT, vit=TINY_VIT, **kw))
    return path


@pytest.fixture
def ade_root(tmp_path):
    return make_ade(tmp_path / 'ade')


@pytest.fixture
def coco_root(tmp_path):
    return make_coco(tmp_path / 'coco')
