# Ablation (Table 12): decoder with half the channels (32 at full resolution; encoder unchanged).
# For the half-depth decoder use model.decoder.num_res_blocks=1 instead.
_base_ = './tokenizer_vqvae_in1k.py'
model = dict(decoder=dict(base_channels=32))
