# The study's tokenizer (tools/study.py): the PeCo recipe (configs/peco/tokenizer_vqvae_in1k.py:
# EMA VQ-VAE, pixel + lambda = 1 perceptual loss, Adam (0.5, 0.95)) at toy scale on the shape
# world: 32 px, 4x down (two downsamples) -> 8x8 codes = the toy ViT's 8x8 patch grid, 16 base
# channels, 1 res block, K = 128, D = 32. Perceptual loss: blocks 1-4 of the toy ViT (standing
# in for blocks 3/6/9/12 of 12), trained supervised on the classes A (or MoCo v3, or left at
# random initialisation: the study's control). Tested on the held-out half of the classes B
# (cls/test): PSNR, SSIM, codeword probe, and the judge (a ResNet trained on its own labelled
# split of B, another architecture than the loss's network) on the reconstructions.
# Deviations: lr 1e-3 and iterations instead of 5e-5 / 100 epochs.
_base_ = '../_base_/toy/tokenizer.py'

root = 'work_dirs/study'
data_root = root + '/world'
perceptual_checkpoint = root + '/perceptual/vit_tiny_pecovit.pth'
img_size = 32
max_iters = 400  # x 32 images

cnn = dict(base_channels=16, channel_mult=(1, 2, 4), num_res_blocks=1)
model = dict(encoder=cnn, decoder=cnn, perceptual=dict(checkpoint=perceptual_checkpoint))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
train_dataloader = dict(batch_size=32, dataset=dict(
    data_root=data_root + '/pretrain', with_label=False, pipeline=train_pipeline))
test_dataloader = dict(batch_size=50, dataset=dict(data_root=data_root + '/cls',
                                                   data_prefix='test'))
test_evaluator = dict(
    perceptual=None,
    classifier=dict(config=root + '/judge/judge_resnet_world.py',
                    checkpoint=root + '/judge/iter_600.pth'))
param_scheduler = [dict(type='LinearLR', start_factor=0.05, by_epoch=False, begin=0,
                        end=max_iters // 10)]
train_cfg = dict(max_iters=max_iters)
default_hooks = dict(logger=dict(interval=20), checkpoint=dict(interval=max_iters))
custom_hooks = [dict(type='CodebookHealthHook', interval=20, usage_threshold=0.05)]
