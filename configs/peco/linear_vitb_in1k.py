# Linear probe of a PeCo ViT-B/16 on ImageNet-1K, MAE's protocol from mmpretrain: frozen
# backbone, BatchNorm (no affine) + linear head on the cls token, LARS lr 6.4 at batch
# 16384 (= 0.1 x 16384 / 256), 90 epochs with 10 warm-up.
# The paper reports no backbone linear probe; this is the standard protocol for comparison.
#
#   tools/dist_train.sh configs/peco/linear_vitb_in1k.py 8 \
#       --cfg-options model.backbone.init_cfg.checkpoint=PRETRAIN.pth
_base_ = 'mmpretrain::mae/benchmarks/vit-base-p16_8xb2048-linear-coslr-90e_in1k.py'
custom_imports = dict(imports=['peco_mm'], allow_failed_imports=False)

data_root = 'data/imagenet'
pretrained = 'work_dirs/pretrain_vitb_in1k_800e/epoch_800.pth'

model = dict(
    backbone=dict(
        _delete_=True,
        type='PeCoViT',
        arch='base',
        qkv_bias='qv',
        use_abs_pos_emb=False,
        rel_pos_bias='per_block',
        layer_scale_init_value=0.1,
        frozen_stages=12,  # everything, final norm included
        out_type='cls_token',
        final_norm=True,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.')))

train_dataloader = dict(dataset=dict(data_root=data_root))
val_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = val_dataloader
