# The study's PeCo pretraining (tools/study.py; Table 2 at toy scale): configs/peco/
# pretrain_vitb_in1k_300e.py (BEiT-style ViT, block-wise masking, predict the frozen
# tokenizer's codes) on the shape world's unlabeled images: width 64, 4 blocks, 32 px, 4 px
# patches -> 8x8 = 64 patches of which 24 are masked (the paper's 75 / 196 = 38 %), targets
# from the lambda = 1 tokenizer of the same seed, encoded in fp32 (the study's reference;
# `tools/study.py --bf16-targets` adds the same runs with bf16 targets).
# Deviations: lr 1.5e-3 kept for batch 64, no drop path, iterations instead of 300 epochs.
_base_ = '../_base_/toy/pretrain.py'

data_root = 'work_dirs/study/world/pretrain'
tokenizer_checkpoint = 'work_dirs/study/tokenizer_lambda1/iter_400.pth'
img_size = 32
max_iters = 600  # x 64 images

model = dict(
    backbone=dict(img_size=img_size, patch_size=4),
    target_generator=dict(checkpoint=tokenizer_checkpoint, encode_bf16=False))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='RandomResizedCropAndInterpolationWithTwoPic', size=img_size,
         interpolation='bicubic', second_interpolation='bicubic', scale=(0.5, 1.0)),
    dict(type='BlockwiseMaskGenerator', input_size=img_size // 4, num_masking_patches=24,
         min_num_patches=4, min_aspect=0.3),
    dict(type='PackInputs'),
]
train_dataloader = dict(batch_size=64, dataset=dict(data_root=data_root, pipeline=train_pipeline))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-2, by_epoch=False, begin=0, end=max_iters // 10),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=False, begin=max_iters // 10,
         end=max_iters),
]
train_cfg = dict(max_iters=max_iters)
default_hooks = dict(logger=dict(interval=20), checkpoint=dict(interval=max_iters))
