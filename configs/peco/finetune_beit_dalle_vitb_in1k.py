# Fine-tuning the BEiT baseline (paper Table 2: BEiT 82.8 top-1 after 300 epochs, against
# PeCo's 84.1): the same recipe as finetune_vitb_in1k.py, from the DALL-E-target pretraining.
_base_ = './finetune_vitb_in1k.py'

model = dict(backbone=dict(
    init_cfg=dict(checkpoint='work_dirs/pretrain_beit_dalle_vitb_in1k_300e/epoch_300.pth')))
