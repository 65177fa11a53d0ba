# PeCo_MAE ViT-B/16 ImageNet-1K fine-tuning (paper appendix A, Table 8: 84.2 top-1). The paper
# gives no PeCo_MAE fine-tuning settings; we use its PeCo recipe (finetune_vitb_in1k.py) on
# MAE's ViT as pretrain_mae_vitb_in1k_800e.py pretrains it (qkv bias, absolute positions, no
# relative-position bias, no layer scale).
_base_ = './finetune_vitb_in1k.py'

model = dict(backbone=dict(
    _base_.mae_vit,
    init_cfg=dict(checkpoint='work_dirs/pretrain_mae_vitb_in1k_800e/epoch_800.pth')))
