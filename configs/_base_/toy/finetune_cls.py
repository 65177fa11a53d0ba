# What the toy-scale classification runs share (configs/demo/finetune_tiny_cls.py, and
# configs/study/finetune_vit_tiny_world.py with the study's configs built on it): the recipe of
# configs/peco/finetune_vitb_in1k.py (PeCoViT, layer decay 0.65, AdamW) on a width-64 ViT at
# 32 px, iteration-based, on an image folder of labelled classes (<root>/{train,val}/<class>/),
# without Mixup / CutMix (on a few dozen images). A run names its data, its ViT, its lr and its
# schedule (both depend on its max_iters).
_base_ = '../../peco/finetune_vitb_in1k.py'

model = dict(head=dict(in_channels=64), train_cfg=dict(_delete_=True))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=32, crop_ratio_range=(0.6, 1.0), backend='pillow'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
train_dataloader = dict(
    # an endless shuffled stream: mmengine's IterBasedTrainLoop restarts a finite one at
    # every epoch end with a 2 s pause and a warning
    sampler=dict(type='InfiniteSampler', shuffle=True), num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='CustomDataset', data_prefix='train',
                 pipeline=train_pipeline))
val_dataloader = dict(
    num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='CustomDataset', data_prefix='val', pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_evaluator = val_evaluator
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop')
auto_scale_lr = dict(enable=False)
default_hooks = dict(checkpoint=dict(type='CheckpointHook', by_epoch=False),
                     logger=dict(type='LoggerHook'))
log_processor = dict(by_epoch=False)
