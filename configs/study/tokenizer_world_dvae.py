# tools/study.py, Table 2's dVAE baseline at toy size (BEiT's tokenizer family, DALL-E's
# discrete VAE): tokenizer_world.py with the Gumbel-softmax quantizer
# (peco_mm/layers/gumbel_quantizer.py) in place of the EMA codebook, on the same unlabeled
# images, the same CNN encoder and decoder, K = 128 codes on the same 8x8 grid. Per position,
# logits over the K codes; in training a relaxed Gumbel-softmax sample at a temperature annealed
# exponentially from 1 to 1/16 over the run (DALL-E's range; the study sets anneal_iters to the
# run's iterations), a KL term to the uniform prior with the small weight 0.01, and the pixel
# reconstruction loss (no perceptual loss, lambda = 0). Its codes for pretraining are the argmax
# of the logits.
_base_ = './tokenizer_world.py'

max_iters = 400
model = dict(
    perceptual_weight=0,
    quantizer=dict(_delete_=True, type='GumbelQuantizer', num_embeddings=128, embed_dims=32,
                   tau_start=1.0, tau_end=1 / 16, anneal_iters=max_iters, kl_weight=0.01))
# the codebook-health hook reads the EMA codebook's restarts; this one has none
custom_hooks = []
