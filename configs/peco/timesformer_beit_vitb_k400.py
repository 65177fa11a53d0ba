"""The BEiT row of Table 9 (K400 75.5): timesformer_vitb_k400.py initialised from BEiT's
ViT-B pretrained 800 epochs on ImageNet-1K with DALL-E codes, instead of PeCo's.

pretrain_beit_dalle_vitb_in1k_300e.py with `train_cfg.max_epochs=800` writes this checkpoint;
a converted BEiT release also loads (tools/convert_checkpoint.py), but BEiT's releases expect
inputs normalised with 127.5 / 127.5: set model.data_preprocessor.mean / std to that for them.
"""
_base_ = './timesformer_vitb_k400.py'

model = dict(backbone=dict(init_cfg=dict(
    checkpoint='work_dirs/pretrain_beit_dalle_vitb_in1k_300e/epoch_800.pth')))
