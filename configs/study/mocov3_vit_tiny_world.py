# The study's perceptual network (tools/study.py): the demo's MoCo v3 recipe
# (configs/demo/mocov3_vit_tiny_photos.py: mmpretrain's mocov3_vit-small-p16 at toy scale) on
# the unlabeled images of the shape world (peco_mm/tooling/shape_world.py): a width-64, 4-block
# ViT at 32 px with 4 px patches (8x8 tokens). tools/convert_checkpoint.py turns the backbone
# into PeCoViT weights. Trained twice with different seeds: one network is the tokenizers'
# perceptual loss, the other only measures (the perceptual distance of Table 4).
# Deviations (toy scale, CPU): fp32, iterations instead of 300 epochs, crops 0.35-1 of the
# image (smaller crops cut the object away at 32 px), and a stronger colour jitter (below).
# It learns shape only in a world drawn upright (the full profile's; tools/study.py --rotation
# draws random angles): rotation is not among its augmentations, so a per-image angle tells two
# views apart as well.
_base_ = '../demo/mocov3_vit_tiny_photos.py'

data_root = 'work_dirs/study/world/pretrain'  # <root>/train/unlabeled/*.png
img_size = 32
max_iters = 300  # x 64 images x 2 views

model = dict(backbone=dict(img_size=img_size, patch_size=4))


def _toy_view(t):
    """A view transform at toy scale: crops of 35-100 %, and colour removed as a shortcut
    (every world image draws its own colours, and the recipe's weak jitter leaves them
    recognisable, so two views match by colour alone): hue jitter 0.5 (the whole circle),
    saturation 0.8, grey-scale with p = 0.5 instead of 0.1 / 0.2 / 0.2."""
    if t['type'] == 'RandomResizedCrop':
        return dict(t, scale=img_size, crop_ratio_range=(0.35, 1.0))
    if t['type'] == 'RandomApply':
        return dict(t, transforms=[dict(t['transforms'][0], saturation=0.8, hue=0.5)])
    if t['type'] == 'RandomGrayscale':
        return dict(t, prob=0.5)
    return t


views = [[_toy_view(t) for t in view] for view in (_base_.view_pipeline1, _base_.view_pipeline2)]
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='MultiView', num_views=[1, 1], transforms=views),
    dict(type='PackInputs'),
]
train_dataloader = dict(batch_size=64, dataset=dict(data_root=data_root,
                                                    pipeline=train_pipeline))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-2, by_epoch=False, begin=0, end=max_iters // 10),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=max_iters // 10, end=max_iters),
]
train_cfg = dict(max_iters=max_iters)
default_hooks = dict(logger=dict(interval=20),
                     checkpoint=dict(interval=max_iters))
