"""The perceptual network of the paper (Sec. 3.2, appendix B): MoCo v3 ViT-B/16 self-supervised
on ImageNet-1K for 100 epochs, by mmpretrain's MoCo v3 ViT-B recipe with 100 epochs instead of
300. MoCo v3 released only a 300-epoch ViT-B (`vit-b-300ep.pth.tar`), which the tokenizer
configs use by default (configs/_base_/tokenizer/vqvae_cnn16.py); this config trains the
paper's 100-epoch one.

    tools/dist_train.sh configs/peco/mocov3_vitb_100e_in1k.py 16    # 16 GPUs x 256 = 4096
    python tools/convert_checkpoint.py work_dirs/mocov3_vitb_100e_in1k/epoch_100.pth \
        checkpoints/mocov3_vit_base_100ep.pth
    # then: --cfg-options model.perceptual.checkpoint=checkpoints/mocov3_vit_base_100ep.pth
"""
_base_ = 'mmpretrain::mocov3/mocov3_vit-base-p16_16xb256-amp-coslr-300e_in1k.py'
env_cfg = dict(dist_cfg=dict(timeout=600))  # a stalled rank ends the job after 10 min, not 30
recipe_gpus = 16  # the GPU count the lr is stated for: auto_scale_lr.base_batch_size = 16 x batch

max_epochs = 100
warmup_epochs = 10  # MoCo v3's main_moco.py default (its 300-epoch ViT recipe sets 40)
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-4, by_epoch=True, begin=0, end=warmup_epochs,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', T_max=max_epochs - warmup_epochs, by_epoch=True,
         begin=warmup_epochs, end=max_epochs, convert_to_iter_based=True),
]
# ours, as every paper-scale config here (the host: fp16 with a dynamic loss scale)
optim_wrapper = dict(dtype='bfloat16')
