"""PeCo's ViT-B/16 and the input normalisation it is pretrained with, stated once for the
pretraining config and every downstream config.

The backbone is BEiT's ViT (PeCo Sec. 3.3: "the original ViT-B/16 ... as in BEiT"): q/v bias,
relative-position bias instead of absolute positions, layer scale 0.1, drop path 0.1 (the
paper's pretraining rate). Pretraining shares one relative-position table across the blocks
(`rel_pos_bias='shared'`); downstream models copy it into each block (`'per_block'`), as BEiT
fine-tunes. Consumers write `dict(_base_.vit_b, <what changes>)`; ViT-L/H change `arch`.
"""
# What the ViT sees, in pretraining and downstream alike: RGB 0..255 normalised with the
# ImageNet statistics (timm's IMAGENET_DEFAULT_MEAN / STD x 255). A downstream config whose
# host preprocessor has other values (mmpretrain's BEiT fine-tuning: 127.5 / 127.5) restates
# these; tests/test_config_pairs.py checks every (pretraining -> downstream) pair.
vit_mean = [123.675, 116.28, 103.53]
vit_std = [58.395, 57.12, 57.375]

vit_b = dict(
    type='PeCoViT',
    arch='base',
    img_size=224,
    patch_size=16,
    qkv_bias='qv',
    use_abs_pos_emb=False,
    rel_pos_bias='per_block',
    layer_scale_init_value=0.1,
    drop_path_rate=0.1)

# PeCo_MAE's encoder is MAE's ViT instead (appendix A): qkv bias, absolute positions, no
# relative-position bias, no layer scale. Its pretraining and downstream configs add these.
mae_vit = dict(qkv_bias='qkv', use_abs_pos_emb=True, rel_pos_bias='none',
               layer_scale_init_value=0.0)
