# The study's judge (tools/study.py): a supervised classifier trained on clean shape-world
# images (judge/train, 100 per class) and tested on cls/val; it scores the tokenizers'
# reconstructions (Table 4's "classifier on reconstructions", where the paper uses DeiT-T).
# the recipe of configs/peco/finetune_vitb_in1k.py on a width-64, 4-block ViT at 32 px with 4 px
# patches, from scratch. Deviations: iterations, no Mixup / CutMix, and no layer-wise lr decay
# (a from-scratch model has no pretrained lower layers to protect: with decay 0.65 its
# lowest block learns at 0.18x the rate, and after 300 iterations on 600 images the judge
# scored 11.5 %, chance; without it, on 3000 images, 43.5 % after 600 iterations).
_base_ = './finetune_vit_tiny_world.py'

data_root = 'work_dirs/study/world'
max_iters = 600
model = dict(backbone=dict(init_cfg=None))
# lr 2e-3, stated here: the few-label runs' 5e-3 (its base) left this from-scratch training
# at loss 2.25 after 600 iterations (14.0 % top-1, against 40.5 % at 2e-3)
optim_wrapper = dict(optimizer=dict(lr=2e-3), paramwise_cfg=dict(layer_decay_rate=1.0))
train_dataloader = dict(batch_size=64, dataset=dict(data_root=data_root + '/judge'))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=max_iters // 10),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=max_iters // 10, end=max_iters),
]
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
default_hooks = dict(checkpoint=dict(interval=max_iters))
