# The study's judge (tools/study.py; Table 4's "classifier on reconstructions", where the paper
# uses DeiT-T): a network of another architecture than the perceptual one, mmpretrain's
# CIFAR ResNet-18 at a quarter width (16 base channels), trained from scratch on its own
# labelled split of the held-out classes B (judge/train), tuned on cls/val and scored on
# cls/test; it classifies the tokenizers' reconstructions of cls/test.
# Recipe: mmpretrain's resnet18_8xb16_cifar10 (SGD, momentum 0.9, weight decay 5e-4, BN) with a
# warm-up and cosine schedule over iterations; crops and flips as the few-label runs.
_base_ = './finetune_vit_tiny_world.py'

data_root = 'work_dirs/study/world'
num_classes = 5  # the classes B of make_world's default split (5 of 10)
max_iters = 600
model = dict(
    _delete_=True, type='ImageClassifier',
    backbone=dict(type='ResNet_CIFAR', depth=18, num_stages=4, out_indices=(3, ),
                  style='pytorch', stem_channels=16, base_channels=16),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=num_classes, in_channels=128,
              loss=dict(type='CrossEntropyLoss', loss_weight=1.0)))
data_preprocessor = dict(num_classes=num_classes)
optim_wrapper = dict(
    _delete_=True, type='OptimWrapper',
    optimizer=dict(type='SGD', lr=0.05, momentum=0.9, weight_decay=5e-4))
train_dataloader = dict(batch_size=64, dataset=dict(data_root=data_root + '/judge'))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=max_iters // 10),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=max_iters // 10, end=max_iters),
]
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
default_hooks = dict(checkpoint=dict(interval=max_iters))
