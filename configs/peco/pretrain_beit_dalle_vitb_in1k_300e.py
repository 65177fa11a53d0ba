"""BEiT baseline for the paper's comparison (Table 2: BEiT 82.8 vs PeCo 84.1 at 300 epochs):
the same ViT, masking, head and recipe as configs/peco/pretrain_vitb_in1k_300e.py, but the
targets are mmpretrain's DALL-E encoder codes of a 112 px view (8x down -> 14x14), as BEiT.

The DALL-E encoder weights are not downloaded; fetch them yourself, e.g. OpenMMLab's
https://download.openmmlab.com/mmselfsup/1.x/target_generator_ckpt/dalle_encoder.pth, and

    tools/dist_train.sh configs/peco/pretrain_beit_dalle_vitb_in1k_300e.py 8 \
        --cfg-options model.target_generator.init_cfg.checkpoint=checkpoints/dalle_encoder.pth
"""
_base_ = './pretrain_vitb_in1k_300e.py'

model = dict(
    head=dict(num_classes=8192),  # DALL-E's vocabulary (it does not expose it as an attribute)
    target_generator=dict(
        _delete_=True,  # a different tokenizer, nothing of PeCoTokenizer's arguments applies
        type='DALL-E',
        init_cfg=dict(type='Pretrained', checkpoint='checkpoints/dalle_encoder.pth')))

# DALL-E's input map: x / 255 * 0.8 + 0.1, i.e. (x - (-31.875)) / 318.75
data_preprocessor = dict(second_mean=[-31.875] * 3, second_std=[318.75] * 3)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ColorJitter', brightness=0.4, contrast=0.4, saturation=0.4, hue=0.),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='RandomResizedCropAndInterpolationWithTwoPic', size=224, second_size=112,
         interpolation='bicubic', second_interpolation='lanczos', scale=(0.08, 1.0)),
    dict(type='BlockwiseMaskGenerator', input_size=14, num_masking_patches=75,
         min_num_patches=16, min_aspect=0.3),
    dict(type='PackInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
