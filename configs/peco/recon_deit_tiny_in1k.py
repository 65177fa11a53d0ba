"""Table 4, second column: an ImageNet-supervised DeiT-T (72.2 % top-1 on clean val in the
paper; mmpretrain's deit-tiny checkpoint) classifying the tokenizer's reconstructions of the
ImageNet-1K val images (PeCo 51.7, without the perceptual loss 17.9, DALL-E 18.2 top-1).
mmpretrain's DeiT-T recipe, its test pipeline and `Accuracy`; the backbone first encodes and
decodes each image with the frozen tokenizer (peco_mm/models/reconstruction_vit.py).

    python tools/test.py configs/peco/recon_deit_tiny_in1k.py DEIT_TINY.pth \
        --cfg-options model.backbone.tokenizer=work_dirs/tokenizer_vqvae_in1k/epoch_100.pth
    # the pixel-only row: work_dirs/tokenizer_vqvae_lambda0_in1k/epoch_100.pth

DEIT_TINY.pth: mmpretrain's deit-tiny_4xb256_in1k checkpoint (a path you give; nothing is
downloaded). Deviation: the reconstructions are rounded to 8-bit pixels before the classifier,
as saved images would be; the paper does not say.
"""
_base_ = 'mmpretrain::deit/deit-tiny_4xb256_in1k.py'
custom_imports = dict(imports=['peco_mm'], allow_failed_imports=False)
env_cfg = dict(dist_cfg=dict(timeout=600))  # a stalled rank ends the job after 10 min, not 30
recipe_gpus = 4  # the GPU count the lr is stated for: auto_scale_lr.base_batch_size = 4 x batch

data_root = 'data/imagenet'
# the tokenizer reads RGB in [-1, 1]; the backbone normalises its reconstructions for DeiT
data_preprocessor = dict(mean=[127.5] * 3, std=[127.5] * 3, to_rgb=True)
model = dict(backbone=dict(type='ReconstructionViT',
                           tokenizer='work_dirs/tokenizer_vqvae_in1k/epoch_100.pth'))
val_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = val_dataloader
