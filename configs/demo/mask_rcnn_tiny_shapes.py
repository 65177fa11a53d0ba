# Stage 4 of the photo toys: Mask R-CNN 1x on the 4-scale adapter + FPN
# (configs/peco/mask_rcnn_vitb_coco.py: layer decay 0.75, AdamW) at toy scale on the demo's
# COCO-layout set (two shapes per photo crop, 96x128, 3 categories): the stage-3 toy PeCoViT
# (width 64, 4 blocks, 8 px patches; the adapter's 2x-up / identity / 2x-down / 4x-down layout
# puts the pyramid at strides 4/8/16/32, those mmdet's anchors and RoI extractors assume, as the
# 16 px patches' 4x / 2x / 1x / 0.5x do), 32-channel FPN and heads. From scratch:
#   --cfg-options model.backbone.init_cfg=None
# Deviations: constant lr 1e-3, images 128x96 instead of 1333x800, epochs set by the demo.
_base_ = '../peco/mask_rcnn_vitb_coco.py'

data_root = 'work_dirs/demo/data/coco/'
pretrained = 'work_dirs/demo/pretrain/iter_200.pth'  # PeCo checkpoint ('backbone.*' keys)
max_epochs = 4  # x 40 images

model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims=64, num_layers=4, num_heads=4),
                  img_size=64, patch_size=8, drop_path_rate=0.0,
                  pyramid=dict(scales=(2, 1, 0.5, 0.25)),
                  init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[64] * 4, out_channels=32),
    rpn_head=dict(in_channels=32, feat_channels=32),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=32),
        bbox_head=dict(in_channels=32, fc_out_channels=64),
        mask_roi_extractor=dict(out_channels=32),
        mask_head=dict(in_channels=32, conv_out_channels=32)),
    train_cfg=dict(rpn_proposal=dict(nms_pre=200, max_per_img=100),
                   rcnn=dict(sampler=dict(num=64))),
    test_cfg=dict(rpn=dict(nms_pre=200, max_per_img=100)))
train_pipeline = [dict(p, scale=(128, 96)) if p['type'] == 'Resize' else p
                  for p in _base_.train_pipeline]
test_pipeline = [dict(p, scale=(128, 96)) if p['type'] == 'Resize' else p
                 for p in _base_.test_pipeline]
train_dataloader = dict(batch_size=4, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(num_workers=0, persistent_workers=False,
                      dataset=dict(data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator
optim_wrapper = dict(optimizer=dict(lr=1e-3))
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=False)]
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
default_hooks = dict(logger=dict(interval=5), checkpoint=dict(interval=max_epochs),
                     visualization=dict(draw=False))
randomness = dict(seed=0)
