"""Mask R-CNN 1x on PeCo ViT-L/16, COCO. Not in the paper (ViT-B only): blocks 8/12/16/24 feed
the adapter (derived from the depth), and the layer decay keeps ViT-B's head-to-patch-embedding
lr ratio: 0.75^13 = 0.024 ~ 0.86^25 = 0.023."""
_base_ = './mask_rcnn_vitb_coco.py'

embed_dims = 1024
model = dict(
    backbone=dict(arch='large', drop_path_rate=0.2,  # deeper model: more stochastic depth
                  with_cp=True,  # recompute each block in backward: ~50x84 tokens x 24 blocks
                  init_cfg=dict(
                      checkpoint='work_dirs/pretrain_vitl_in1k_800e/epoch_800.pth')),
    neck=dict(in_channels=[embed_dims] * 4))
optim_wrapper = dict(paramwise_cfg=dict(layer_decay_rate=0.86))
