"""Mask R-CNN 1x on the PeCo_MAE ViT-B/16, COCO (paper appendix A, Table 8: 47.3 APbox /
42.2 APmask). The paper gives no PeCo_MAE settings; we use its PeCo recipe
(mask_rcnn_vitb_coco.py) on MAE's ViT as pretrain_mae_vitb_in1k_800e.py pretrains it."""
_base_ = './mask_rcnn_vitb_coco.py'

model = dict(backbone=dict(
    _base_.mae_vit,
    init_cfg=dict(checkpoint='work_dirs/pretrain_mae_vitb_in1k_800e/epoch_800.pth')))
