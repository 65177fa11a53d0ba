"""PeCo_lite ViT-B/16, 800 epochs (paper Table 2: 84.5 IN-1K top-1, the same as PeCo's): the
800-epoch PeCo recipe with the lite tokenizer, as pretrain_lite_vitb_in1k_300e.py explains.
"""
_base_ = './pretrain_vitb_in1k_800e.py'

# the lite tokenizer (configs/peco/tokenizer_vqvae_lite_in1k.py); its checkpoint records its
# half-channel architecture, so only the file is named here
model = dict(target_generator=dict(
    checkpoint='work_dirs/tokenizer_vqvae_lite_in1k/epoch_100.pth'))
