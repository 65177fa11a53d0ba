# The study's self-supervised perceptual network on geometry-matched pairs (tools/study.py
# --perceptual pairs): mocov3_vit_tiny_world.py's MoCo v3 whose two views are not two
# augmentations of one image but the two images of a pair of the world's pretrain_pairs split
# (one shape at one pose under two independent draws of colour, texture, background and
# lighting; no labels). What the two views share is the geometry, so the network is pushed to
# keep it and drop the nuisances. Each view keeps the recipe's own augmentations (crops, flip,
# colour jitter, grey-scale, blur, solarize).
_base_ = './mocov3_vit_tiny_world.py'

data_root = 'work_dirs/study/world/pretrain_pairs'  # <root>/{a,b}/unlabeled/*.png
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='GeometryPairViews', transforms=_base_.views, pair_dirs=('a', 'b')),
    dict(type='PackInputs'),
]
train_dataloader = dict(dataset=dict(data_root=data_root, data_prefix='a',
                                     pipeline=train_pipeline))
