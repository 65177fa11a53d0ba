# PeCo on ViT-B/16 (Sec. 3.3): BEiT's pretraining ViT -- q/v bias, one relative-position table
# shared by all blocks, layer scale 0.1, drop path 0.1, learnable [MASK] -- predicting the codes
# of the frozen PeCo tokenizer at the masked patches. The head's width comes from the backbone
# and its K from the tokenizer (8192).
# trained with configs/peco/tokenizer_vqvae_in1k.py
tokenizer_checkpoint = 'work_dirs/tokenizer_vqvae_in1k/epoch_100.pth'

model = dict(
    type='PeCo',
    backbone=dict(
        type='PeCoViT',
        arch='base',
        img_size=224,
        patch_size=16,
        qkv_bias='qv',
        use_abs_pos_emb=False,
        rel_pos_bias='shared',
        layer_scale_init_value=0.1,
        drop_path_rate=0.1,
        use_mask_token=True,
        out_type='raw'),
    head=dict(type='PeCoMIMHead'),
    # the paper's tokenizer (16x down, K = 8192): encoder + codebook, frozen, inputs in
    # [-1, 1]; its architecture is read from the checkpoint (tools/train.py stores the config)
    target_generator=dict(type='FrozenPeCoTokenizer', checkpoint=tokenizer_checkpoint))
