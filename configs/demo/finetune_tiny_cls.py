# Toy-scale run of configs/peco/finetune_vitb_in1k.py for the tests: the same recipe (PeCoViT,
# layer decay 0.65, AdamW, warm-up + cosine) on a width-64, depth-2 ViT at 32 px,
# iteration-based, on an image folder of labelled classes (peco_mm.tooling.demo_data).
_base_ = '../peco/finetune_vitb_in1k.py'

data_root = 'work_dirs/demo/data/cls'  # <root>/{train,val}/<class>/*.png
num_classes = 3
max_iters = 40

model = dict(
    backbone=dict(embed_dims=64, num_layers=2, num_heads=4, img_size=32, patch_size=8,
                  init_cfg=None),
    head=dict(num_classes=num_classes, in_channels=64),
    train_cfg=dict(_delete_=True))  # no Mixup / CutMix on a few dozen images
data_preprocessor = dict(num_classes=num_classes)  # merged into the base's mean / std

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
    sampler=dict(type='InfiniteSampler', shuffle=True),
    batch_size=6, num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='CustomDataset', data_root=data_root, data_prefix='train',
                 pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=6, num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='CustomDataset', data_root=data_root, data_prefix='val',
                 pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_evaluator = val_evaluator

optim_wrapper = dict(optimizer=dict(lr=2e-3))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=5),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=5, end=max_iters),
]
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=max_iters,
                 val_interval=max_iters)
auto_scale_lr = dict(enable=False)
default_hooks = dict(
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=4, max_keep_ckpts=20),
    logger=dict(type='LoggerHook', interval=1))
log_processor = dict(by_epoch=False)
env_cfg = dict(dist_cfg=dict(backend='gloo'))
