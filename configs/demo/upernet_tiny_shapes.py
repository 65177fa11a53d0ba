# Stage 4 of the photo toys: UperNet on the 4-scale adapter (configs/peco/upernet_vitb_ade20k.py:
# layer decay 0.65, AdamW, BN heads) at toy scale on the demo's ADE20K-layout set (shapes on
# photo crops, 64x96, 3 classes + "other"): the stage-3 toy PeCoViT (width 64, 4 blocks, 8 px
# patches; blocks 1/2/3/4 feed the pyramid), 64x64 crops. From scratch:
#   --cfg-options model.backbone.init_cfg=None
# Deviations: constant lr 1e-3 (no warm-up / poly decay), no photometric distortion.
_base_ = '../peco/upernet_vitb_ade20k.py'

data_root = 'work_dirs/demo/data/ade/ADEChallengeData2016'
pretrained = 'work_dirs/demo/pretrain/iter_200.pth'  # PeCo checkpoint ('backbone.*' keys)
crop = (64, 64)
max_iters = 100  # x 4 crops

model = dict(
    data_preprocessor=dict(size=crop),
    backbone=dict(arch=dict(_delete_=True, embed_dims=64, num_layers=4, num_heads=4),
                  img_size=crop, patch_size=8, drop_path_rate=0.0,
                  init_cfg=dict(checkpoint=pretrained)),
    decode_head=dict(in_channels=[64] * 4, channels=32, pool_scales=(1, 2)),
    auxiliary_head=dict(in_channels=64, channels=16),
    test_cfg=dict(crop_size=crop, stride=(48, 48)))
train_pipeline = [
    dict(p, scale=(96, 64)) if p['type'] == 'RandomResize' else
    dict(p, crop_size=crop) if p['type'] == 'RandomCrop' else p
    for p in _base_.train_pipeline if p['type'] != 'PhotoMetricDistortion']
test_pipeline = [dict(p, scale=(96, 64)) if p['type'] == 'Resize' else p
                 for p in _base_.test_pipeline]
train_dataloader = dict(batch_size=4, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
                      dataset=dict(data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader
optim_wrapper = dict(optimizer=dict(lr=1e-3))
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=False)]
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
default_hooks = dict(logger=dict(interval=10), checkpoint=dict(interval=max_iters),
                     visualization=dict(draw=False))
randomness = dict(seed=0)
