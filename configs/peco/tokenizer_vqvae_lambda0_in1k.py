# Ablation (appendix, Table 10): lambda = 0, the plain pixel VQ-VAE (no perceptual network
# is built, so no perceptual checkpoint is needed).
_base_ = './tokenizer_vqvae_in1k.py'
model = dict(perceptual_weight=0.0)
