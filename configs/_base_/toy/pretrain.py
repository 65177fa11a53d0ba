# What the toy-scale PeCo pretrainings share (configs/demo/pretrain_tiny_photos.py and
# configs/study/pretrain_peco_world.py, with the study's pixel-codebook row): the recipe of
# configs/peco/pretrain_vitb_in1k_300e.py (BEiT-style ViT, block-wise masking, predict the
# frozen tokenizer's codes) on a width-64, 4-block ViT without drop path, iteration-based, on an
# unlabelled image folder. A run names its data, its tokenizer, its image and patch size (and so
# its pipeline) and its schedule.
_base_ = '../../peco/pretrain_vitb_in1k_300e.py'

model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims=64, num_layers=4, num_heads=4),
                  drop_path_rate=0.0))
train_dataloader = dict(
    # an endless shuffled stream: mmengine's IterBasedTrainLoop restarts a finite one at
    # every epoch end with a 2 s pause and a warning
    sampler=dict(type='InfiniteSampler', shuffle=True),
    num_workers=0, persistent_workers=False, pin_memory=False,
    dataset=dict(_delete_=True, type='CustomDataset', data_prefix='train', with_label=False))
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop')
default_hooks = dict(checkpoint=dict(by_epoch=False, max_keep_ckpts=1))
log_processor = dict(by_epoch=False)
randomness = dict(seed=0, diff_rank_seed=True)
