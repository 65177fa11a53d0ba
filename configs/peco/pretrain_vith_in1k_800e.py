"""PeCo ViT-H/14, 800 epochs (paper Table 1: 87.5 top-1 at 224, 88.3 at 448).

Assumptions (the paper states none for ViT-H): patch 14 as MAE's ViT-H, so 224 px gives a
16x16 grid; the tokenizer view is then 256 px (16x down -> 16x16 codes, one per patch) and
98 of the 256 patches are masked, BEiT's 75/196 = 38% ratio. Layer-scale init 1e-5 as BEiT-L.

Memory (ours): bf16 autocast and gradient checkpointing (`with_cp`) at the paper's total
batch 2048 = 8 GPUs x 256. Fewer GPUs or less memory: pretrain_vith_in1k_800e_accum.py
(gradient accumulation); sharded: ..._fsdp.py.
"""
_base_ = './pretrain_vitb_in1k_800e.py'

model = dict(backbone=dict(arch='huge', patch_size=14, layer_scale_init_value=1e-5,
                           with_cp=True))

# the base's pipeline with a 256 px tokenizer view and 98 of 16x16 patches masked
train_pipeline = [
    dict(t, second_size=256) if t['type'] == 'RandomResizedCropAndInterpolationWithTwoPic' else
    dict(t, input_size=16, num_masking_patches=98) if t['type'] == 'BlockwiseMaskGenerator' else
    t for t in _base_.train_pipeline]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
