# Ablation (Table 12): ViT-B/16 encoder and inverse-ViT-B decoder (16x16 patches -> 14x14 codes).
_base_ = './tokenizer_vqvae_in1k.py'
vit = dict(arch='base', img_size=224, patch_size=16)
model = dict(encoder=dict(_delete_=True, type='ViTEncoder', **vit),
             decoder=dict(_delete_=True, type='ViTDecoder', **vit))
