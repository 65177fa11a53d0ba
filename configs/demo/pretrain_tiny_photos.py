# Stage 3 of the photo toys: PeCo masked image modeling (configs/peco/pretrain_vitb_in1k_300e.py:
# BEiT-style ViT, block-wise masking, predict the frozen tokenizer's codes) at toy scale on the
# demo photo crops: width 64, 4 blocks, 64 px, 8 px patches -> 8x8 = 64 patches of which 24
# are masked (the paper's 75 / 196 = 38 %), targets from the stage-2 perceptual tokenizer.
# Deviations: lr 1.5e-3 kept for batch 32 (not scaled down from 2048), no drop path,
# iterations instead of 300 epochs.
_base_ = '../_base_/toy/pretrain.py'

data_root = 'work_dirs/demo/data/imagenet'
tokenizer_checkpoint = 'work_dirs/demo/tokenizer/iter_150.pth'
img_size = 64
max_iters = 200  # x 32 crops

model = dict(
    backbone=dict(img_size=img_size, patch_size=8),
    # the stage-2 tokenizer; its architecture is read from the checkpoint
    target_generator=dict(checkpoint=tokenizer_checkpoint))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ColorJitter', brightness=0.4, contrast=0.4, saturation=0.4, hue=0.),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='RandomResizedCropAndInterpolationWithTwoPic', size=img_size,
         interpolation='bicubic', second_interpolation='bicubic', scale=(0.3, 1.0)),
    dict(type='BlockwiseMaskGenerator', input_size=img_size // 8, num_masking_patches=24,
         min_num_patches=4, min_aspect=0.3),
    dict(type='PackInputs'),
]
train_dataloader = dict(batch_size=32, dataset=dict(data_root=data_root, pipeline=train_pipeline))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-2, by_epoch=False, begin=0, end=max_iters // 10),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=False, begin=max_iters // 10,
         end=max_iters),
]
train_cfg = dict(max_iters=max_iters)
default_hooks = dict(logger=dict(interval=10), checkpoint=dict(interval=max_iters))
