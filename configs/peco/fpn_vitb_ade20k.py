"""Semantic FPN (Kirillov et al. 2019) on PeCo ViT-B/16, ADE20K 512x512, same schedule and
optimizer as the UperNet config. Not in the paper: a lighter decoder on the same pyramid."""
_base_ = ['mmseg::_base_/models/fpn_r50.py', '../_base_/dense/peco_vit_ade20k_160k.py']

embed_dims = 768
norm_cfg = _base_.bn
model = dict(
    pretrained=None,
    data_preprocessor=dict(size=(512, 512)),
    backbone=_base_.backbone,
    neck=dict(in_channels=[embed_dims] * 4),  # FPN 768 x 4 -> 256 x 4
    decode_head=dict(num_classes=150, norm_cfg=norm_cfg),
    test_cfg=dict(mode='slide', crop_size=(512, 512), stride=(341, 341)))
