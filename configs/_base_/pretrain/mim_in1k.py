# ImageNet-1K for BEiT-style masked image modeling (PeCo Sec. 3.3, "the same setup as BEiT"):
# colour jitter 0.4, flip, one random-resized crop (scale 0.08-1) and 75 of the 14x14 = 196
# patches masked block-wise (blocks of >= 16 patches, aspect 0.3..1/0.3).
# PeCo's tokenizer sees the ViT's 224 px (16x down -> 14x14 codes = the ViT's 224/16 patch
# grid), so the crop is resized once and the data preprocessor normalises that view twice
# (OneViewTwoNormDataPreprocessor); BEiT resizes a second time, which here would repeat the
# first resize exactly. A tokenizer of another input size sets `second_size` (and
# `second_interpolation`) on the crop, as pretrain_vith_in1k_800e.py does.
# A config that changes a size restates `train_pipeline` (lists are replaced, not merged).
# The normalisation of both model inputs is the model's (./peco_vitb.py: data_preprocessor).
dataset_type = 'ImageNet'
data_root = 'data/imagenet'  # DATA_ROOT/train/<class>/*.JPEG (+ meta/train.txt)
recipe_gpus = 8  # the GPU count the lr is stated for: auto_scale_lr.base_batch_size = 8 x batch

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ColorJitter', brightness=0.4, contrast=0.4, saturation=0.4, hue=0.),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='RandomResizedCropAndInterpolationWithTwoPic', size=224,
         interpolation='bicubic', second_interpolation='bicubic', scale=(0.08, 1.0)),
    dict(type='BlockwiseMaskGenerator', input_size=14, num_masking_patches=75,
         min_num_patches=16, min_aspect=0.3),
    dict(type='PackInputs'),
]

train_dataloader = dict(
    batch_size=256,  # per GPU; 8 GPUs x 256 = the paper's 2048
    # per GPU: this machine's cores per GPU but one (peco_mm/supervisor/workers.py; 15 on 16
    # cores per GPU), the workers a 0.39 s step at batch 256 needs (docs/benchmarks.md)
    num_workers='auto',
    persistent_workers=True,
    pin_memory=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(type=dataset_type, data_root=data_root, split='train',
                 pipeline=train_pipeline))
