# Stage 1 of the photo toys: the perceptual network. mmpretrain's MoCo v3 ViT recipe
# (mocov3_vit-small-p16, the paper's kind of perceptual net: Sec. 3.2 uses MoCo v3 ViT-B) at toy
# scale on the demo photo crops: a width-64, 4-block ViT at 64 px with 8 px patches.
# tools/convert_checkpoint.py then turns its backbone into PeCoViT weights for the tokenizer.
# Deviations (toy scale, CPU): fp32 OptimWrapper instead of AMP, 3x256 projector, iterations
# instead of 300 epochs, lr for batch 32.
_base_ = 'mmpretrain::mocov3/mocov3_vit-small-p16_16xb256-amp-coslr-300e_in1k.py'
custom_imports = dict(imports=['peco_mm'], allow_failed_imports=False)
env_cfg = dict(dist_cfg=dict(timeout=600))  # a stalled rank ends the job after 10 min, not 30

data_root = 'work_dirs/demo/data/imagenet'  # <root>/train/<photo>/*.png (tools/make_demo_data.py)
img_size = 64
embed_dims = 64
max_iters = 200  # x 32 images x 2 views

model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims=embed_dims, num_layers=4, num_heads=4,
                            feedforward_channels=4 * embed_dims),
                  img_size=img_size, patch_size=8),
    neck=dict(in_channels=embed_dims, hid_channels=256, out_channels=64),
    head=dict(predictor=dict(in_channels=64, hid_channels=256, out_channels=64)))


# the base's two views, cropped at 64 px with scale 0.2-1 (few photos)
views = [[dict(t, scale=img_size, crop_ratio_range=(0.2, 1.0))
          if t['type'] == 'RandomResizedCrop' else t for t in view]
         for view in (_base_.view_pipeline1, _base_.view_pipeline2)]
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='MultiView', num_views=[1, 1],
         transforms=views),
    dict(type='PackInputs'),
]
train_dataloader = dict(
    # an endless shuffled stream: mmengine's IterBasedTrainLoop restarts a finite one at
    # every epoch end with a 2 s pause and a warning
    sampler=dict(type='InfiniteSampler', shuffle=True),
    batch_size=32, num_workers=0, persistent_workers=False, pin_memory=False,
    collate_fn=dict(_delete_=True, type='default_collate'),  # the base's carries a _scope_ key
    dataset=dict(_delete_=True, type='CustomDataset', data_root=data_root, data_prefix='train',
                 with_label=False, pipeline=train_pipeline))
optim_wrapper = dict(_delete_=True, type='OptimWrapper',
                     optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.1))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-2, by_epoch=False, begin=0, end=max_iters // 10),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=max_iters // 10, end=max_iters),
]
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=max_iters)
default_hooks = dict(logger=dict(interval=10),
                     checkpoint=dict(by_epoch=False, interval=max_iters, max_keep_ckpts=1))
log_processor = dict(by_epoch=False)
randomness = dict(seed=0)
