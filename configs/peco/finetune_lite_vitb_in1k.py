# PeCo_lite ViT-B/16 ImageNet-1K fine-tuning (paper Table 2: 84.5 top-1 after 800 epochs,
# 84.0 after 300): the paper's recipe of finetune_vitb_in1k.py from the PeCo_lite pretraining.
# The 300-epoch row: --cfg-options model.backbone.init_cfg.checkpoint=
#     work_dirs/pretrain_lite_vitb_in1k_300e/epoch_300.pth
_base_ = './finetune_vitb_in1k.py'

model = dict(backbone=dict(
    init_cfg=dict(checkpoint='work_dirs/pretrain_lite_vitb_in1k_800e/epoch_800.pth')))
