# Ablation (appendix, Table 10): perceptual loss weight lambda = 3 (default 1).
_base_ = './tokenizer_vqvae_in1k.py'
model = dict(perceptual_weight=3)
