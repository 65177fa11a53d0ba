"""mmseg's ADE20K data (512x512 crops, 0.5-2.0 rescale, flip, photometric distortion), with a
label-range check right after each label map is loaded (an error names the file)."""
_base_ = 'mmseg::_base_/datasets/ade20k.py'

# labels after reduce_zero_label: 0..num_classes-1 and 255 (ignored); num_classes is the
# model's decode_head.num_classes (filled in by tools/train.py, ADE20K: 150)
label_check = dict(type='CheckSegLabels', ignore_index=255)
# [LoadImageFromFile, LoadAnnotations] + check + [RandomResize, RandomCrop, RandomFlip, ...]
train_pipeline = [*_base_.train_pipeline[:2], label_check, *_base_.train_pipeline[2:]]
# [LoadImageFromFile, Resize, LoadAnnotations] + check + [PackSegInputs]
test_pipeline = [*_base_.test_pipeline[:3], label_check, *_base_.test_pipeline[3:]]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
