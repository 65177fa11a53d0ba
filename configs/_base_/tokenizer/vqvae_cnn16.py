# PeCo tokenizer (paper Sec. 3.1-3.2, appendix B): CNN encoder/decoder, 64 channels at the
# first stage doubled at each downsample up to 512 (1, 2, 4, 8, 8): 16x down, 224 px -> 14x14
# codes; GroupNorm, 2 residual blocks per resolution, self-attention at the lowest resolution;
# EMA codebook K = 8192, D = 256, beta = 0.25; perceptual loss weight 1 with MoCo v3 ViT-B
# (100 epochs) at blocks 3/6/9/12. Encoder 35.4M + codebook 2.1M = 37.5M parameters.
perceptual_checkpoint = 'checkpoints/mocov3_vit_base_100ep.pth'  # MoCo v3 release, any format
model = dict(
    type='PeCoTokenizer',
    base_channels=64,
    channel_mult=(1, 2, 4, 8, 8),
    num_res_blocks=2,
    num_embeddings=8192,
    embed_dims=256,
    decay=0.99,
    beta=0.25,
    codebook_init='data',
    restart_threshold=1.0,  # not in the paper: restart codes used < 1x per step (EMA)
    perceptual_weight=1.0,
    perceptual_cfg=dict(net='vit', checkpoint=perceptual_checkpoint, layers=(3, 6, 9, 12)),
    data_preprocessor=dict(type='TokenizerDataPreprocessor'))  # uint8 BGR -> RGB [-1, 1]
