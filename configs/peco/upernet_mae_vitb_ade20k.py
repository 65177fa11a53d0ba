"""UperNet on the PeCo_MAE ViT-B/16, ADE20K (paper appendix A, Table 8: 48.2 mIoU). The paper
gives no PeCo_MAE settings; we use its PeCo recipe (upernet_vitb_ade20k.py) on MAE's ViT as
pretrain_mae_vitb_in1k_800e.py pretrains it; its 14x14 absolute positions are resized to the
32x32 grid of 512 crops."""
_base_ = './upernet_vitb_ade20k.py'

model = dict(backbone=dict(
    _base_.mae_vit,
    init_cfg=dict(checkpoint='work_dirs/pretrain_mae_vitb_in1k_800e/epoch_800.pth')))
