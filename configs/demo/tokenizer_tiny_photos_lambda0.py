# Stage 2 of the photo toys, the control: the same toy tokenizer without the perceptual loss
# (lambda = 0, as configs/peco/tokenizer_vqvae_lambda0_in1k.py), a plain pixel VQ-VAE.
_base_ = './tokenizer_tiny_photos.py'
model = dict(perceptual_weight=0.0)
