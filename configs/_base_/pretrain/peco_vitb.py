# PeCo on ViT-B/16 (Sec. 3.3): BEiT's pretraining ViT (../models/peco_vit_b.py) with one
# relative-position table shared by all blocks and a learnable [MASK], predicting the codes of
# the frozen PeCo tokenizer at the masked patches. The head's width comes from the backbone
# and its K from the tokenizer (8192).
_base_ = '../models/peco_vit_b.py'

# trained with configs/peco/tokenizer_vqvae_in1k.py
tokenizer_checkpoint = 'work_dirs/tokenizer_vqvae_in1k/epoch_100.pth'

data_preprocessor = dict(
    # one view per sample (or two, when the pipeline sets second_size), normalised twice
    type='OneViewTwoNormDataPreprocessor',
    # view 1 (ViT): the normalisation every downstream config repeats (../models/peco_vit_b.py)
    mean=_base_.vit_mean,
    std=_base_.vit_std,
    # view 2 (tokenizer): 0..255 -> [-1, 1], the PeCoTokenizer's input range
    second_mean=[127.5, 127.5, 127.5],
    second_std=[127.5, 127.5, 127.5],
    to_rgb=True)

model = dict(
    type='PeCo',
    backbone=dict(_base_.vit_b, rel_pos_bias='shared', use_mask_token=True),
    head=dict(type='PeCoMIMHead'),
    # the paper's tokenizer (16x down, K = 8192): encoder + codebook, frozen, inputs in
    # [-1, 1]; its architecture is read from the checkpoint (tools/train.py stores the config).
    # Its encoder runs in bf16 where the device computes bf16 natively ('auto'; the codeword
    # search stays fp32): fp32 and bf16 targets trained the same models in the study of
    # docs/benchmarks.md. encode_bf16=False gives fp32 targets everywhere.
    target_generator=dict(type='FrozenPeCoTokenizer', checkpoint=tokenizer_checkpoint,
                          encode_bf16='auto'))
