# The study's segmentation from scratch, with a recipe of its own (tools/study.py):
# upernet_vit_tiny_world.py from random initialisation and without layer-wise lr decay (no
# pretrained lower layers to protect). The study also runs it compute-matched: pretraining
# plus fine-tuning iterations.
_base_ = './upernet_vit_tiny_world.py'

model = dict(backbone=dict(init_cfg=None))
optim_wrapper = dict(paramwise_cfg=dict(layer_decay_rate=1.0))
