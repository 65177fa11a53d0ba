"""Synthetic ADE20K- and COCO-format datasets and tiny configs for the dense tests.

The images are learnable on purpose: each object is a flat, class-coloured shape on a noisy
gray background, so a few dozen iterations of a tiny model already score above chance.
"""
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from tests.conftest import ROOT

# class k (1-based, ADE numbering: 0 = "other") is painted in COLOURS[k - 1]
COLOURS = [(220, 30, 30), (30, 200, 40), (40, 60, 230)]


def _scene(rng, h, w, n_obj):
    """A noisy background with n_obj axis-aligned rectangles: (image, [(cls, x0, y0, x1, y1)])."""
    img = rng.integers(90, 140, (h, w, 3)).astype(np.uint8)
    objs = []
    for _ in range(n_obj):
        c = int(rng.integers(1, len(COLOURS) + 1))
        bw, bh = int(rng.integers(w // 4, w // 2)), int(rng.integers(h // 4, h // 2))
        x0, y0 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
        img[y0:y0 + bh, x0:x0 + bw] = COLOURS[c - 1]
        objs.append((c, x0, y0, x0 + bw, y0 + bh))
    return img, objs


def make_ade(root: Path, n_train: int = 8, n_val: int = 2, size=(64, 96), seed: int = 0) -> Path:
    """ADEChallengeData2016 layout: images/{training,validation}/*.jpg and single-channel
    annotations/{training,validation}/*.png (0 = other, 1..3 = classes)."""
    rng = np.random.default_rng(seed)
    for split, n in (('training', n_train), ('validation', n_val)):
        (root / 'images' / split).mkdir(parents=True, exist_ok=True)
        (root / 'annotations' / split).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            img, objs = _scene(rng, size[0], size[1], 3)
            label = np.zeros(size, np.uint8)
            for c, x0, y0, x1, y1 in objs:  # later objects paint over earlier ones, as in img
                label[y0:y1, x0:x1] = c
            Image.fromarray(img).save(root / 'images' / split / f'ADE_{split}_{i:04d}.jpg',
                                      quality=95)
            Image.fromarray(label).save(root / 'annotations' / split / f'ADE_{split}_{i:04d}.png')
    return root


COCO_CATS = [dict(id=1, name='person'), dict(id=2, name='bicycle'), dict(id=3, name='car')]


def make_coco(root: Path, n_train: int = 6, n_val: int = 2, size=(96, 128),
              seed: int = 0) -> Path:
    """COCO layout: {train,val}2017/*.jpg and annotations/instances_{train,val}2017.json with
    polygon masks (non-overlapping boxes, so each polygon is the visible object)."""
    rng = np.random.default_rng(seed)
    (root / 'annotations').mkdir(parents=True, exist_ok=True)
    ann_id = 1
    for split, n in (('train2017', n_train), ('val2017', n_val)):
        (root / split).mkdir(parents=True, exist_ok=True)
        images, anns = [], []
        for i in range(n):
            h, w = size
            img = rng.integers(90, 140, (h, w, 3)).astype(np.uint8)
            pil = Image.fromarray(img)
            draw = ImageDraw.Draw(pil)
            # two objects in the left / right halves: a rectangle and a triangle
            for k, (xa, xb) in enumerate(((4, w // 2 - 4), (w // 2 + 4, w - 4))):
                c = int(rng.integers(1, 4))
                x0 = int(rng.integers(xa, xa + 8))
                x1 = int(rng.integers(xb - 8, xb))
                y0 = int(rng.integers(4, h // 3))
                y1 = int(rng.integers(2 * h // 3, h - 4))
                if k == 0:
                    poly = [x0, y0, x1, y0, x1, y1, x0, y1]
                else:
                    poly = [(x0 + x1) // 2, y0, x1, y1, x0, y1]
                draw.polygon(poly, fill=COLOURS[c - 1])
                xs, ys = poly[0::2], poly[1::2]
                bbox = [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)]
                area = float(bbox[2] * bbox[3] * (1.0 if k == 0 else 0.5))
                anns.append(dict(id=ann_id, image_id=i + 1, category_id=c, iscrowd=0,
                                 bbox=[float(v) for v in bbox], area=area,
                                 segmentation=[[float(v) for v in poly]]))
                ann_id += 1
            name = f'{i + 1:012d}.jpg'
            pil.save(root / split / name, quality=95)
            images.append(dict(id=i + 1, file_name=name, height=h, width=w))
        with open(root / 'annotations' / f'instances_{split}.json', 'w') as f:
            json.dump(dict(images=images, annotations=anns, categories=COCO_CATS), f)
    return root


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
