"""PeCo_MAE ViT-B/16, 800 epochs (paper appendix A, Table 8: 84.2 IN-1K, 48.2 ADE20K mIoU,
47.3/42.2 COCO box/mask AP): MAE's asymmetric encoder-decoder predicting the PeCo codes of
the 75% randomly masked patches.

The paper gives no PeCo_MAE settings; these are MAE's (He et al. 2022): ViT-B with qkv bias
and absolute positions, decoder 512-d x 8 blocks, random masking 0.75, crop scale 0.2-1, no
colour jitter, AdamW lr 2.4e-3 = 1.5e-4 x 4096 / 256 at total batch 4096 (8 GPUs x 512;
scale linearly with the batch), betas (0.9, 0.95), weight decay 0.05, 40 warm-up epochs,
cosine to 0, no drop path, no gradient clipping.

Downstream: configs/peco/{finetune,upernet,mask_rcnn}_mae_vitb_*.py (PeCo's downstream
recipes with MAE's ViT).
"""
_base_ = './pretrain_vitb_in1k_800e.py'

model = dict(
    type='PeCoMAE',
    backbone=dict(_base_.mae_vit, drop_path_rate=0.0, use_mask_token=False),
    neck=dict(type='PeCoMAEDecoder', grid=14, embed_dims=512, num_layers=8, num_heads=16))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    # MAE flips after its crop; the flip comes first here, as in ../_base_/pretrain/mim_in1k.py
    # (the same distribution of views): after the crop there are two views, which RandomFlip
    # does not take
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    # one 224 px view for the ViT and the tokenizer (see ../_base_/pretrain/mim_in1k.py)
    dict(type='RandomResizedCropAndInterpolationWithTwoPic', size=224,
         interpolation='bicubic', second_interpolation='bicubic', scale=(0.2, 1.0)),
    dict(type='RandomMaskGenerator', input_size=14, mask_ratio=0.75),  # MAE's random 75 %
    dict(type='PackInputs'),
]
train_dataloader = dict(batch_size=512, dataset=dict(pipeline=train_pipeline))

optim_wrapper = dict(
    optimizer=dict(lr=2.4e-3, betas=(0.9, 0.95), weight_decay=0.05),
    clip_grad=None,
    # weight decay as mmpretrain's MAE recipe: none for the decoder's [MASK] token, nor (the
    # backbone's `no_weight_decay()`) the cls token; MAE's own code decays both (timm's
    # add_weight_decay without a skip list exempts only 1-d parameters), one vector each
    paramwise_cfg=dict(custom_keys={'neck.mask_token': dict(decay_mult=0.0)}))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-4, by_epoch=True, begin=0, end=40,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=0.0, by_epoch=True, begin=40, end=800,
         convert_to_iter_based=True),
]
auto_scale_lr = dict(base_batch_size=4096)
