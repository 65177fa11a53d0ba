# PeCo_lite tokenizer (Table 2: 25.7M): the first stage halved to 32 channels and still doubled
# at each downsample, 32-64-128-256-512, instead of 64-128-256-512-512. This reading of "half
# the channels" is the one that gives the paper's count: encoder 23.65M + codebook 2.10M =
# 25.75M. (Halving every stage, 32..256, would give 9.2M + 2.1M = 11.3M.) Same 16x down.
_base_ = './tokenizer_vqvae_in1k.py'
lite = dict(base_channels=32, channel_mult=(1, 2, 4, 8, 16))
model = dict(encoder=lite, decoder=lite)
