# Linear probe of a PeCo ViT-B/16 on ImageNet-1K, MAE's protocol from mmpretrain: frozen
# backbone, BatchNorm (no affine) + linear head on the cls token, LARS lr 6.4 at batch
# 16384 (= 0.1 x 16384 / 256), 90 epochs with 10 warm-up.
# The paper reports no backbone linear probe; this is the standard protocol for comparison.
#
#   tools/dist_train.sh configs/peco/linear_vitb_in1k.py 8 \
#       --cfg-options model.backbone.init_cfg.checkpoint=PRETRAIN.pth
_base_ = [
    'mmpretrain::mae/benchmarks/vit-base-p16_8xb2048-linear-coslr-90e_in1k.py',
    '../_base_/models/peco_vit_b.py',
]
custom_imports = dict(imports=['peco_mm'], allow_failed_imports=False)
env_cfg = dict(dist_cfg=dict(timeout=600))  # a stalled rank ends the job after 10 min, not 30
recipe_gpus = 8  # the GPU count the lr is stated for: auto_scale_lr.base_batch_size = 8 x batch
# lr 6.4 belongs to the total batch 8 x 2048 = 16384 (the host config keeps 1024)
auto_scale_lr = dict(base_batch_size=recipe_gpus * 2048)

data_root = 'data/imagenet'

model = dict(
    backbone=dict(
        _base_.vit_b,
        _delete_=True,  # the host's VisionTransformer -> PeCoViT
        drop_path_rate=0.0,  # frozen: no stochastic depth
        frozen_stages=12,  # everything, final norm included
        out_type='cls_token',
        final_norm=True,
        init_cfg=dict(type='Pretrained', prefix='backbone.',
                      checkpoint='work_dirs/pretrain_vitb_in1k_800e/epoch_800.pth')))

train_dataloader = dict(dataset=dict(data_root=data_root))
val_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = val_dataloader

optim_wrapper = dict(dtype='bfloat16')  # the host's AmpOptimWrapper, bf16 instead of fp16
