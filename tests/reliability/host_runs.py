"""Tiny runs of host models only (no peco_mm class in their model or test pipeline) through
tools/train.py: a Mask R-CNN and an UperNet on an 8-channel ResNet-18, and an mmpretrain ViT
classifier, each one iteration on the data the tests write. Their checkpoints are what a user's own process loads
with the hosts' loaders, where peco_mm cannot be imported."""
from pathlib import Path

from tests.conftest import ROOT, run_tool
from tests.dense.conftest import make_ade, make_coco

from peco_mm.tooling.demo_data import make_class_folder

# one iteration, one checkpoint, no evaluation, no peco_mm import, a plain optimizer
ONE_STEP = """
custom_imports = None
optim_wrapper = dict(_delete_=True, type='OptimWrapper', optimizer=dict(type='AdamW', lr=1e-3))
param_scheduler = []
default_hooks = dict(checkpoint=dict(interval=1, by_epoch=False))
log_processor = dict(by_epoch=False)
randomness = dict(seed=0)
"""
RESNET = "dict(_delete_=True, type='{cls}', depth=18, base_channels=8, {stem}init_cfg=None)"
CONFIGS = {
    'mask_rcnn': """
_base_ = '{root}/configs/demo/mask_rcnn_tiny_shapes.py'
model = dict(backbone=%s, neck=dict(in_channels=[8, 16, 32, 64]))
train_dataloader = dict(batch_size=2, dataset=dict(type='CocoDataset', data_root='{coco}/'))
val_dataloader = dict(dataset=dict(type='CocoDataset', data_root='{coco}/'))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file='{coco}/annotations/instances_val2017.json')
test_evaluator = val_evaluator
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=1, val_interval=100)
""" % RESNET.format(cls='ResNet', stem=''),
    'upernet': """
_base_ = '{root}/configs/demo/upernet_tiny_shapes.py'
model = dict(backbone=%s, decode_head=dict(in_channels=[8, 16, 32, 64]),
             auxiliary_head=dict(in_channels=32))
test_pipeline = [p for p in _base_.test_pipeline if p['type'] != 'CheckSegLabels']
train_dataloader = dict(batch_size=2, dataset=dict(data_root='{ade}'))
val_dataloader = dict(dataset=dict(data_root='{ade}', pipeline=test_pipeline))
test_dataloader = val_dataloader
train_cfg = dict(max_iters=1, val_interval=100)
""" % RESNET.format(cls='ResNetV1c', stem='stem_channels=8, '),
    'classifier': """
_base_ = '{root}/configs/demo/finetune_tiny_cls.py'
model = dict(backbone=dict(_delete_=True, type='VisionTransformer', img_size=32, patch_size=8,
                           arch=dict(embed_dims=64, num_layers=2, num_heads=4,
                                     feedforward_channels=128), out_type='avg_featmap'))
train_dataloader = dict(batch_size=4, dataset=dict(data_root='{cls}'))
val_dataloader = dict(dataset=dict(data_root='{cls}'))
test_dataloader = val_dataloader
train_cfg = dict(max_iters=1, val_interval=100)
""",
}


def train_host_runs(tmp: Path) -> dict:
    """{name: (the config the run dumped into its work dir, its checkpoint)}."""
    make_class_folder(tmp / 'cls' / 'train', per_class=2)
    make_class_folder(tmp / 'cls' / 'val', seed=1, per_class=1)
    data = dict(root=ROOT, coco=make_coco(tmp / 'coco'), ade=make_ade(tmp / 'ade'),
                cls=tmp / 'cls')
    runs = {}
    for name, text in CONFIGS.items():
        cfg = tmp / f'{name}.py'
        cfg.write_text(text.format(**data) + ONE_STEP)
        work = tmp / f'work_{name}'
        run_tool(['tools/train.py', cfg, '--work-dir', work])
        runs[name] = (work / cfg.name, work / 'iter_1.pth')
    return runs
