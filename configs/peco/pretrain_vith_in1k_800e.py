"""PeCo ViT-H/14, 800 epochs (paper Table 1: 87.5 top-1 at 224, 88.3 at 448).

Assumptions (the paper states none for ViT-H): patch 14 as MAE's ViT-H, so 224 px gives a
16x16 grid; the tokenizer view is then 256 px (16x down -> 16x16 codes, one per patch) and
98 of the 256 patches are masked, BEiT's 75/196 = 38% ratio. Layer-scale init 1e-5 as BEiT-L.
Total batch 2048 (8 GPUs x 256; use more GPUs or gradient accumulation for memory).
"""
_base_ = './pretrain_vitb_in1k_800e.py'

model = dict(backbone=dict(arch='huge', patch_size=14, layer_scale_init_value=1e-5))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ColorJitter', brightness=0.4, contrast=0.4, saturation=0.4, hue=0.),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='RandomResizedCropAndInterpolationWithTwoPic', size=224, second_size=256,
         interpolation='bicubic', second_interpolation='bicubic', scale=(0.08, 1.0)),
    dict(type='BlockwiseMaskGenerator', input_size=16, num_masking_patches=98,
         min_num_patches=16, min_aspect=0.3),
    dict(type='PackInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
