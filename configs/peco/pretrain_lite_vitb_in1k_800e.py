"""PeCo_lite ViT-B/16, 800 epochs (paper Table 2: 84.5 IN-1K top-1, the same as PeCo's): the
800-epoch PeCo recipe with the lite tokenizer, as pretrain_lite_vitb_in1k_300e.py explains.
"""
_base_ = './pretrain_vitb_in1k_800e.py'

# trained with configs/peco/tokenizer_vqvae_lite_in1k.py, whose channel arguments these are
model = dict(target_generator=dict(
    base_channels=32, channel_mult=(1, 2, 4, 8, 16),
    init_cfg=dict(checkpoint='work_dirs/tokenizer_vqvae_lite_in1k/epoch_100.pth')))
