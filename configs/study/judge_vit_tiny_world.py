# The study's judge (tools/study.py): a supervised classifier trained on clean shape-world
# images (judge/train, 100 per class) and tested on cls/val; it scores the tokenizers'
# reconstructions (Table 4's "classifier on reconstructions", where the paper uses DeiT-T).
# the recipe of configs/peco/finetune_vitb_in1k.py on a width-64, 4-block ViT at 32 px with 4 px
# patches, from scratch. Deviations: iterations, no Mixup / CutMix.
_base_ = './finetune_vit_tiny_world.py'

data_root = 'work_dirs/study/world'
max_iters = 600
model = dict(backbone=dict(init_cfg=None))
train_dataloader = dict(batch_size=64, dataset=dict(data_root=data_root + '/judge'))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=max_iters // 10),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=max_iters // 10, end=max_iters),
]
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
default_hooks = dict(checkpoint=dict(interval=max_iters))
