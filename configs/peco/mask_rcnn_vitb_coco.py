"""Mask R-CNN 1x on PeCo ViT-B/16 with the 4-scale adapter + FPN, COCO (PeCo Sec. 4.2; 47.8 APbox
/ 42.6 APmask for the 800-epoch ViT-B). Settings: 12 epochs, short side 800 / long <= 1333,
AdamW 4e-4, wd 0.05, batch 16, steps at 8 and 11, layer decay 0.75, drop path 0.1.

    tools/dist_train.sh configs/peco/mask_rcnn_vitb_coco.py 8     # 8 GPUs x 2 images
    python tools/test.py configs/peco/mask_rcnn_vitb_coco.py CKPT  # COCO bbox + segm AP
"""
_base_ = ['mmdet::_base_/models/mask-rcnn_r50_fpn.py', '../_base_/dense/peco_vit_coco_1x.py']

embed_dims = 768
model = dict(backbone=_base_.backbone, neck=dict(in_channels=[embed_dims] * 4))
