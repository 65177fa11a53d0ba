# PeCo ViT-L/16 ImageNet-1K fine-tuning (paper Table 1: 86.5 top-1 at 224, 800-epoch
# pretraining). The paper states its fine-tuning recipe for ViT-B only (finetune_vitb_in1k.py)
# and compares ViT-L/H with MAE, so:
# - the paper's: lr 4e-3, cosine decay to 0, average pooling, BEiT's augmentation and Mixup /
#   CutMix (finetune_vitb_in1k.py);
# - the reference's, MAE's ViT-L recipe (mmpretrain mae/benchmarks/
#   vit-large-p16_8xb128-coslr-50e_in1k.py): 50 epochs, 5 warm-up epochs, layer decay 0.75,
#   drop path 0.2, lr 4e-3 at batch 1024 = 8 GPUs x 128;
# - ours: bf16 autocast, with_cp (each block recomputed in the backward pass).
_base_ = './finetune_vitb_in1k.py'

max_epochs = 50
model = dict(
    backbone=dict(arch='large', drop_path_rate=0.2, with_cp=True,
                  init_cfg=dict(checkpoint='work_dirs/pretrain_vitl_in1k_800e/epoch_800.pth')),
    head=dict(in_channels=1024))
optim_wrapper = dict(paramwise_cfg=dict(layer_decay_rate=0.75))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-4, by_epoch=True, begin=0, end=5,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', by_epoch=True, begin=5, end=max_epochs, eta_min=0.0,
         convert_to_iter_based=True),
]
train_cfg = dict(max_epochs=max_epochs)
