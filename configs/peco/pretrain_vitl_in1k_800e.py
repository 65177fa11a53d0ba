"""PeCo ViT-L/16, 800 epochs (paper Table 1: 86.5 top-1 at 224). The paper gives no ViT-L
pretraining settings beyond ViT-B's; we keep them and take BEiT-L's layer-scale init 1e-5
(0.1 is unstable at 24 blocks). Total batch 2048, lr 1.5e-3 (scale linearly as in the 300e
config when the batch differs).

Memory (ours): bf16 autocast (the base's AmpOptimWrapper) and gradient checkpointing
(`with_cp`: each block's activations are recomputed in the backward pass, about 1/3 more
compute) at 2048 = 8 GPUs x 256. Fewer GPUs or less memory:
pretrain_vitl_in1k_800e_accum.py (gradient accumulation); sharded: ..._fsdp.py.
"""
_base_ = './pretrain_vitb_in1k_800e.py'

model = dict(backbone=dict(arch='large', layer_scale_init_value=1e-5, with_cp=True))
