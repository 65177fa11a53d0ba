# ImageNet-1K train set for tokenizer training (224 px crops); val set for tools/test.py.
data_root = 'data/imagenet'  # DATA_ROOT/{train,val}/<class>/*.JPEG (+ meta/*.txt)
img_size = 224
recipe_gpus = 8  # the GPU count the lr is stated for: auto_scale_lr.base_batch_size = 8 x batch
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=img_size, backend='pillow'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=img_size * 256 // 224, edge='short', backend='pillow'),
    dict(type='CenterCrop', crop_size=img_size),
    dict(type='PackInputs'),
]
train_dataloader = dict(
    batch_size=16,  # x 8 GPUs = 128, the paper's batch
    num_workers=8,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(type='ImageNet', data_root=data_root, split='train', pipeline=train_pipeline))
test_dataloader = dict(
    batch_size=32,
    num_workers=8,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type='ImageNet', data_root=data_root, split='val', pipeline=test_pipeline))
test_evaluator = dict(type='TokenizerMetric')  # K from the model's predictions
test_cfg = dict()
