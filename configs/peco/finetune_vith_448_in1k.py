# PeCo ViT-H/14 ImageNet-1K fine-tuning at 448 px (paper Table 1: PeCo-H_448, 88.3 top-1),
# straight from the 224 px pretraining as MAE's ViT-H_448 (mmpretrain mae/benchmarks/
# vit-huge-p14_32xb8-coslr-50e_in1k-448px.py: random-resized crops of 448, test resize 512 and
# centre crop 448). 448 / 14 = 32x32 patches: the pretraining's 16x16 relative-position tables
# are resized when the checkpoint is loaded. Otherwise finetune_vith_in1k.py.
#
# Batch 1024 as the 224 px run, with gradient accumulation for the 4x longer sequences (ours):
#   1024 = 8 GPUs x 64 images x 2 accumulation steps
# On G GPUs: accumulative_counts = 1024 / (G x 64). Keep auto_scale_lr off with accumulation
# (mmengine scales by GPUs x batch_size and does not count the accumulation).
_base_ = './finetune_vith_in1k.py'

img_size = 448
model = dict(backbone=dict(img_size=img_size))
train_pipeline = [dict(t, scale=img_size) if t['type'] == 'RandomResizedCrop' else t
                  for t in _base_.train_pipeline]
test_pipeline = [dict(t, scale=512) if t['type'] == 'ResizeEdge' else
                 dict(t, crop_size=img_size) if t['type'] == 'CenterCrop' else t
                 for t in _base_.test_pipeline]
train_dataloader = dict(batch_size=64, dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
optim_wrapper = dict(accumulative_counts=2)  # 1024 = 8 GPUs x 64 x 2
