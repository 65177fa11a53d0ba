# The study's few-label classification from scratch, with a recipe of its own
# (tools/study.py): finetune_vit_tiny_world.py from random initialisation, without layer-wise
# lr decay (no pretrained lower layers to protect; with decay 0.65 the lowest block learns at
# 0.18x the rate) and at lr 2e-3, the lr at which this ViT learns from scratch in the world
# (the supervised perceptual network's: 5e-3 left it at 14.0 % top-1 against 40.5 % at 2e-3).
# The study also runs it compute-matched: pretraining plus fine-tuning iterations.
_base_ = './finetune_vit_tiny_world.py'

model = dict(backbone=dict(init_cfg=None))
optim_wrapper = dict(optimizer=dict(lr=2e-3), paramwise_cfg=dict(layer_decay_rate=1.0))
