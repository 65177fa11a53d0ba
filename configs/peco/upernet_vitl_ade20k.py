"""UperNet on PeCo ViT-L/16, ADE20K 512x512, 160k iterations. Not in the paper (ViT-B only):
blocks 8/12/16/24 feed the pyramid (derived from the depth), and the layer decay keeps
ViT-B's head-to-patch-embedding lr ratio: 0.65^13 = 0.0037 ~ 0.8^25 = 0.0038."""
_base_ = './upernet_vitb_ade20k.py'

embed_dims = 1024
model = dict(
    backbone=dict(arch='large', drop_path_rate=0.3,  # deeper model: more stochastic depth
                  with_cp=True,  # recompute each block in backward: 32x32 tokens x 24 blocks
                  init_cfg=dict(
                      checkpoint='work_dirs/pretrain_vitl_in1k_800e/epoch_800.pth')),
    decode_head=dict(in_channels=[embed_dims] * 4, channels=1024),
    auxiliary_head=dict(in_channels=embed_dims))
optim_wrapper = dict(paramwise_cfg=dict(layer_decay_rate=0.8))
