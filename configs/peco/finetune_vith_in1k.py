# PeCo ViT-H/14 ImageNet-1K fine-tuning at 224 (paper Table 1: 87.5 top-1). As
# finetune_vitl_in1k.py (the paper's lr and schedule shape, MAE's 50 epochs, 5 warm-up epochs
# and layer decay 0.75), with MAE's ViT-H drop path 0.3 (mmpretrain mae/benchmarks/
# vit-huge-p14_8xb128-coslr-50e_in1k.py). Batch 1024 = 8 GPUs x 128.
_base_ = './finetune_vitl_in1k.py'

model = dict(
    backbone=dict(arch='huge', patch_size=14, drop_path_rate=0.3,
                  init_cfg=dict(checkpoint='work_dirs/pretrain_vith_in1k_800e/epoch_800.pth')),
    head=dict(in_channels=1280))
