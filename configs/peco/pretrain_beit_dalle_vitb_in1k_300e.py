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
# the base's pipeline with DALL-E's 112 px, Lanczos-resized view (8x down -> 14x14 codes)
train_pipeline = [
    dict(t, second_size=112, second_interpolation='lanczos')
    if t['type'] == 'RandomResizedCropAndInterpolationWithTwoPic' else t
    for t in _base_.train_pipeline]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
