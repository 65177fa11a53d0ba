"""Everything but the detector for PeCo ViT-B/16 on COCO, 1x schedule (PeCo appendix B): data,
schedule, optimizer, backbone. Leaf configs add an mmdet model base (Mask R-CNN, Cascade Mask
R-CNN) and write `model = dict(backbone=_base_.backbone, neck=dict(in_channels=...))`. The
host's data preprocessor normalises as the pretraining did (ImageNet mean / std, RGB)."""
_base_ = [
    'mmdet::_base_/datasets/coco_instance.py',  # short side 800, long side <= 1333, flip
    'mmdet::_base_/schedules/schedule_1x.py',  # 12 epochs, lr steps at 8 and 11, 500 warm-up
    'mmdet::_base_/default_runtime.py',
    '../models/peco_vit_b.py',
]
custom_imports = dict(imports=['peco_mm'], allow_failed_imports=False)
env_cfg = dict(dist_cfg=dict(timeout=600))  # a stalled rank ends the job after 10 min, not 30

# mmdet's CocoDataset + a check at load time that every listed image exists
train_dataloader = dict(dataset=dict(type='CheckedCocoDataset'))
val_dataloader = dict(dataset=dict(type='CheckedCocoDataset'))
test_dataloader = val_dataloader

# BN in the adapter; SyncBN when distributed (see the ADE20K base); `sync_bn=None` to keep BN
sync_bn = 'torch'

# BEiT-style ViT-B/16 as PeCo pretrains it. Position tables stay at the pretraining 14x14 and
# are resized on the fly to each padded image's grid (e.g. 800x1216 -> 50x76 patches).
# Pretrained weights, one key (`--cfg-options model.backbone.init_cfg.checkpoint=PATH`): a PeCo
# pretraining checkpoint ('backbone.*' keys) or a file from tools/convert_checkpoint.py.
backbone = dict(
    _base_.vit_b,
    _delete_=True,  # the host model's ResNet -> PeCoViT
    out_type='featmap',  # blocks 4/6/8/12 -> strides 4/8/16/32, then FPN adds stride 64
    final_norm=False,
    pyramid=dict(norm_cfg=dict(type='BN', requires_grad=True)),
    init_cfg=dict(type='Pretrained',
                  checkpoint='work_dirs/pretrain_vitb_in1k_800e/epoch_800.pth'))

# AdamW 4e-4, wd 0.05, layer decay 0.75 (patch embedding: 0.75^13 = 0.024x); batch 16 =
# 8 GPUs x 2 images (the base's batch_size=2)
recipe_gpus = 8  # the GPU count the lr is stated for: auto_scale_lr.base_batch_size = 8 x batch
optim_wrapper = dict(
    # fp16 autocast with a dynamic loss scale (ours), as mmdet's AMP configs: mmcv's RoIAlign
    # CUDA kernels take fp32 / fp16 only, so bf16 is not an option here (on CPU: tools/train.py).
    type='AmpOptimWrapper',
    optimizer=dict(_delete_=True, type='AdamW', lr=4e-4, betas=(0.9, 0.999), weight_decay=0.05),
    constructor='LayerDecayOptimWrapperConstructor',
    paramwise_cfg=dict(layer_decay_rate=0.75))
