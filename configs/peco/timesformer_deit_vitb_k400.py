"""The DeiT-B baseline of Table 9 (K400 75.4): TimeSformer with DeiT-B's ViT (qkv bias,
absolute positions, no relative-position bias, no layer scale, cls-token output), lr 1e-4 for
the backbone and 1e-3 for the classification head (the paper's), weight decay 1e-4, batch 64.

The table files DeiT-B under "training from scratch"; we read it as the supervised
ImageNet-1K DeiT-B (no self-supervised pretraining) that TimeSformer starts from: DeiT's
release `deit_base_patch16_224-b5f2ef4d.pth`, converted on the fly. For a random start, set
`model.backbone.init_cfg=None`.
"""
_base_ = './timesformer_vitb_k400.py'

model = dict(backbone=dict(
    _base_.mae_vit,  # qkv bias, absolute positions: DeiT's ViT as MAE's
    out_type='cls_token',
    final_norm=True,
    init_cfg=dict(prefix=None, checkpoint='checkpoints/deit_base_patch16_224-b5f2ef4d.pth')))

optim_wrapper = dict(
    optimizer=dict(lr=1e-4),
    # no layer decay; the head (cls_head.fc_cls) at 10x the backbone's lr: 1e-3
    paramwise_cfg=dict(layer_decay_rate=1.0, custom_keys={'cls_head': dict(lr_mult=10.0)}))
