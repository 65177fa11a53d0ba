"""Tiny runs through tools/train.py, one iteration each on the data the tests write, whose
checkpoints a user's own process loads with the hosts' loaders: a Mask R-CNN, an UperNet and
a classifier, either of host models only (no peco_mm class in their model or test pipeline:
an 8-channel ResNet-18 for the dense models, mmpretrain's ViT; loaded where peco_mm cannot be
imported) or the demo's PeCoViT models (`peco=True`)."""
from pathlib import Path

from tests.conftest import ROOT, run_tool
from tests.dense.conftest import make_ade, make_coco

from peco_mm.tooling.demo_data import make_class_folder

# the demo's three dense and classification toys, one iteration each on the test's data; the
# fields say which backbone they train and what their test pipeline leaves out
CONFIGS = {
    'mask_rcnn': """
_base_ = '{root}/configs/demo/mask_rcnn_tiny_shapes.py'
model = dict(backbone={det_backbone}, neck=dict(in_channels={channels}))
train_dataloader = dict(batch_size=2, dataset=dict(type='{coco_type}', data_root='{coco}/'))
val_dataloader = dict(dataset=dict(type='{coco_type}', data_root='{coco}/'))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file='{coco}/annotations/instances_val2017.json')
test_evaluator = val_evaluator
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=1, val_interval=100)
""",
    'upernet': """
_base_ = '{root}/configs/demo/upernet_tiny_shapes.py'
model = dict(backbone={seg_backbone}, decode_head=dict(in_channels={channels}),
             auxiliary_head=dict(in_channels={channels}[2]))
test_pipeline = [p for p in _base_.test_pipeline if p['type'] not in {dropped}]
train_dataloader = dict(batch_size=2, dataset=dict(data_root='{ade}'))
val_dataloader = dict(dataset=dict(data_root='{ade}', pipeline=test_pipeline))
test_dataloader = val_dataloader
train_cfg = dict(max_iters=1, val_interval=100)
""",
    'classifier': """
_base_ = '{root}/configs/demo/finetune_tiny_cls.py'
model = dict(backbone={cls_backbone})
train_dataloader = dict(batch_size=4, dataset=dict(data_root='{cls}'))
val_dataloader = dict(dataset=dict(data_root='{cls}'))
test_dataloader = val_dataloader
train_cfg = dict(max_iters=1, val_interval=100)
""",
}
ONE_CHECKPOINT = """
default_hooks = dict(checkpoint=dict(interval=1, by_epoch=False))
log_processor = dict(by_epoch=False)
randomness = dict(seed=0)
"""
# the demo's PeCoViT models, from scratch
PECO = dict(det_backbone='dict(init_cfg=None)', seg_backbone='dict(init_cfg=None)',
            cls_backbone='dict()', channels=[64] * 4, coco_type='CheckedCocoDataset',
            dropped=[], extra='')
# host classes only, no peco_mm import in the config, a plain optimizer
RESNET = "dict(_delete_=True, type='{}', depth=18, base_channels=8, {}init_cfg=None)"
HOST = dict(
    det_backbone=RESNET.format('ResNet', ''),
    seg_backbone=RESNET.format('ResNetV1c', 'stem_channels=8, '),
    cls_backbone="dict(_delete_=True, type='VisionTransformer', img_size=32, patch_size=8, "
                 "arch=dict(embed_dims=64, num_layers=2, num_heads=4, feedforward_channels=128),"
                 " out_type='avg_featmap')",
    channels=[8, 16, 32, 64], coco_type='CocoDataset', dropped=['CheckSegLabels'],
    extra="custom_imports = None\noptim_wrapper = dict(_delete_=True, type='OptimWrapper', "
          "optimizer=dict(type='AdamW', lr=1e-3))\nparam_scheduler = []\n")


def train_host_runs(tmp: Path, peco: bool = False) -> dict:
    """{name: (the config the run dumped into its work dir, its checkpoint)}."""
    make_class_folder(tmp / 'cls' / 'train', per_class=2)
    make_class_folder(tmp / 'cls' / 'val', seed=1, per_class=1)
    data = dict(root=ROOT, coco=make_coco(tmp / 'coco'), ade=make_ade(tmp / 'ade'),
                cls=tmp / 'cls')
    runs = {}
    fields = PECO if peco else HOST
    for name, text in CONFIGS.items():
        cfg = tmp / f'{name}.py'
        cfg.write_text(text.format(**data, **fields) + ONE_CHECKPOINT + fields['extra'])
        work = tmp / f'work_{name}'
        run_tool(['tools/train.py', cfg, '--work-dir', work])
        runs[name] = (work / cfg.name, work / 'iter_1.pth')
    return runs
