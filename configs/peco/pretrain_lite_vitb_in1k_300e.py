"""PeCo_lite ViT-B/16, 300 epochs (paper Table 2: 84.0 IN-1K top-1 after fine-tuning): the
PeCo recipe of pretrain_vitb_in1k_300e.py with the lite tokenizer as the target, half the
channels (25.7M instead of 37.5M parameters, configs/peco/tokenizer_vqvae_lite_in1k.py), which
the paper says halves the time the tokenizer adds to a step. 800 epochs:
pretrain_lite_vitb_in1k_800e.py; fine-tuning: finetune_lite_vitb_in1k.py.
"""
_base_ = './pretrain_vitb_in1k_300e.py'

# the lite tokenizer (configs/peco/tokenizer_vqvae_lite_in1k.py); its checkpoint records its
# half-channel architecture, so only the file is named here
model = dict(target_generator=dict(
    checkpoint='work_dirs/tokenizer_vqvae_lite_in1k/epoch_100.pth'))
