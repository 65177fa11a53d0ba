"""PeCo ViT-B/16 pretraining on the codes of the 8x tokenizer (paper Table 12, "CNN (8x)":
83.8 IN-1K top-1 after fine-tuning, against 84.1 for the 16x tokenizer), 300 epochs.

The 8x tokenizer (configs/peco/tokenizer_vqvae_8x_in1k.py) is trained at 112 px, where it gives
112 / 8 = 14 x 14 codes, the ViT's 224 / 16 patch grid. So the crop gives the ViT 224 px and
the tokenizer a second, 112 px view of the same crop (BEiT's two-picture crop, as BEiT feeds
DALL-E 112 px). Fine-tuning: finetune_vitb_in1k.py with
`model.backbone.init_cfg.checkpoint=work_dirs/pretrain_8x_vitb_in1k_300e/epoch_300.pth`.

    tools/dist_train.sh configs/peco/pretrain_8x_vitb_in1k_300e.py 8
"""
_base_ = './pretrain_vitb_in1k_300e.py'

model = dict(target_generator=dict(
    checkpoint='work_dirs/tokenizer_vqvae_8x_in1k/epoch_100.pth'))

# the base's pipeline with a 112 px view for the tokenizer
train_pipeline = [
    dict(t, second_size=112) if t['type'] == 'RandomResizedCropAndInterpolationWithTwoPic'
    else t for t in _base_.train_pipeline]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
