# Ablation (Table 12): 8x encoder/decoder, one stage removed, trained at 112 px
# (112 / 8 = 14x14 codes, as 224 / 16). Encoder 23.6M + codebook 2.1M.
_base_ = './tokenizer_vqvae_in1k.py'
img_size = 112
model = dict(encoder=dict(channel_mult=(1, 2, 4, 8)), decoder=dict(channel_mult=(1, 2, 4, 8)))
train_dataloader = dict(dataset=dict(pipeline=[
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=img_size, backend='pillow'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]))
test_dataloader = dict(dataset=dict(pipeline=[
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=128, edge='short', backend='pillow'),
    dict(type='CenterCrop', crop_size=img_size),
    dict(type='PackInputs'),
]))
