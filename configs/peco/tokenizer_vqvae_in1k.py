# PeCo tokenizer on ImageNet-1K with the paper's settings (appendix B): VQ-VAE with CNN
# encoder/decoder (16x, 37.5M encoder + codebook), EMA codebook K = 8192, perceptual loss
# lambda = 1 on MoCo v3 ViT-B blocks 3/6/9/12; Adam (0.5, 0.95), lr 5e-5, batch 128
# (8 GPUs x 16), 100 epochs, 5000 warm-up iterations.
#
#   tools/dist_train.sh configs/peco/tokenizer_vqvae_in1k.py 8 \
#       --cfg-options model.perceptual.checkpoint=MOCOV3_VITB.pth
#   python tools/test.py configs/peco/tokenizer_vqvae_in1k.py \
#       work_dirs/tokenizer_vqvae_in1k/epoch_100.pth
_base_ = [
    'mmpretrain::_base_/default_runtime.py',
    '../_base_/tokenizer/vqvae_cnn16.py',
    '../_base_/tokenizer/in1k_224.py',
    '../_base_/tokenizer/schedule_adam_100e.py',
]
custom_imports = dict(imports=['peco_mm'], allow_failed_imports=False)
env_cfg = dict(dist_cfg=dict(timeout=600))  # a stalled rank ends the job after 10 min, not 30

# tools/test.py measures the perceptual distance of EVERY tokenizer (lambda = 0 and the
# ResNet-50 / VGG16 variants included) with this one network, so the numbers share a scale;
# pass test_evaluator.perceptual.checkpoint=PATH when the MoCo v3 file lives elsewhere.
test_evaluator = dict(perceptual=dict(net='vit', checkpoint=_base_.perceptual_checkpoint,
                                      layers=(3, 6, 9, 12)))

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50),
    checkpoint=dict(type='CheckpointHook', interval=1, max_keep_ckpts=3))
custom_hooks = [
    # usage / perplexity / restarts over each 50-iteration window; warning below 50 %
    dict(type='CodebookHealthHook', interval=50, usage_threshold=0.5, warmup_iters=1000),
    dict(type='ReconstructionVisHook', interval=5000, num_images=8),
]
log_processor = dict(by_epoch=True)
