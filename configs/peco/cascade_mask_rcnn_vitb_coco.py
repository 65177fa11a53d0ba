"""Cascade Mask R-CNN 1x on PeCo ViT-B/16 + 4-scale adapter + FPN, COCO; the Mask R-CNN config's
schedule, optimizer and backbone (not in the paper)."""
_base_ = ['mmdet::_base_/models/cascade-mask-rcnn_r50_fpn.py',
          '../_base_/dense/peco_vit_coco_1x.py']

embed_dims = 768
model = dict(backbone=_base_.backbone, neck=dict(in_channels=[embed_dims] * 4))
