# Toy-scale run of configs/peco/finetune_vitb_in1k.py for the tests: the same recipe (PeCoViT,
# layer decay 0.65, AdamW, warm-up + cosine) on a width-64, depth-2 ViT at 32 px,
# iteration-based, on an image folder of labelled classes (peco_mm.tooling.demo_data).
_base_ = '../_base_/toy/finetune_cls.py'

data_root = 'work_dirs/demo/data/cls'  # <root>/{train,val}/<class>/*.png
num_classes = 3
max_iters = 40

model = dict(
    backbone=dict(embed_dims=64, num_layers=2, num_heads=4, img_size=32, patch_size=8,
                  init_cfg=None),
    head=dict(num_classes=num_classes))
data_preprocessor = dict(num_classes=num_classes)  # merged into the base's mean / std
train_dataloader = dict(batch_size=6, dataset=dict(data_root=data_root))
val_dataloader = dict(batch_size=6, dataset=dict(data_root=data_root))
test_dataloader = val_dataloader

optim_wrapper = dict(optimizer=dict(lr=2e-3))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=5),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=5, end=max_iters),
]
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
default_hooks = dict(checkpoint=dict(interval=4, max_keep_ckpts=20), logger=dict(interval=1))
env_cfg = dict(dist_cfg=dict(backend='gloo'))
