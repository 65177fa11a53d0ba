# Stage 2 of the photo toys: the PeCo tokenizer recipe (configs/peco/tokenizer_vqvae_in1k.py:
# EMA VQ-VAE, pixel + lambda=1 perceptual loss, Adam (0.5, 0.95)) at toy scale on the demo photo
# crops: 64 px, 8x down (one stage fewer, as Table 12's 8x variant) -> 8x8 codes = the toy
# ViT's 8x8 patch grid, 16 base channels, 1 res block, K = 128, D = 32. The perceptual network
# is the toy MoCo v3 ViT of stage 1 (converted to PeCoViT), blocks 1-4 of 4 standing in for
# blocks 3/6/9/12 of 12. Deviations: lr 1e-3 and iterations instead of 5e-5 / 100 epochs.
_base_ = '../_base_/toy/tokenizer.py'

data_root = 'work_dirs/demo/data/imagenet'  # train/ for training, held-out val/ for testing
perceptual_checkpoint = 'work_dirs/demo/mocov3/mocov3_vit_tiny_pecovit.pth'
img_size = 64
max_iters = 150  # x 16 crops (3 seeds x 2 tokenizers in the demo's time budget)

cnn = dict(base_channels=16, channel_mult=(1, 2, 2, 4), num_res_blocks=1)
model = dict(encoder=cnn, decoder=cnn, perceptual=dict(checkpoint=perceptual_checkpoint))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=img_size, crop_ratio_range=(0.5, 1.0),
         backend='pillow'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
train_dataloader = dict(batch_size=16, dataset=dict(data_root=data_root, pipeline=train_pipeline))
test_dataloader = dict(batch_size=16, dataset=dict(data_root=data_root, data_prefix='val'))
# the perceptual distance of both demo tokenizers (lambda = 1 and 0) with the stage-1 network
test_evaluator = dict(perceptual=dict(checkpoint=perceptual_checkpoint, layers=(1, 2, 3, 4),
                                      vit_cfg=dict(num_heads=4)))
param_scheduler = [dict(type='LinearLR', start_factor=0.05, by_epoch=False, begin=0,
                        end=max_iters // 10)]
train_cfg = dict(max_iters=max_iters)
default_hooks = dict(logger=dict(interval=10), checkpoint=dict(interval=max_iters))
custom_hooks = [dict(type='CodebookHealthHook', interval=10, usage_threshold=0.05),
                dict(type='ReconstructionVisHook', interval=max_iters, num_images=8)]
