"""Something-Something v2 for the TimeSformer configs: mmaction2's VideoDataset on the .webm
videos (the lists as mmaction2's SSv2 data preparation writes them), 8 frames by uniform
sampling (TSN segments, as TimeSformer samples SSv2), no flip (left / right changes some
labels). A config takes `sthv2_*` into its dataloaders; the rest comes from its Kinetics-400
config."""
sthv2_root = 'data/sthv2/videos'
sthv2_num_classes = 174


def sthv2_loader(ann_file, pipeline, batch_size, test_mode):
    return dict(
        batch_size=batch_size, num_workers=8, persistent_workers=True,
        sampler=dict(type='DefaultSampler', shuffle=not test_mode),
        dataset=dict(type='VideoDataset', ann_file=ann_file, data_prefix=dict(video=sthv2_root),
                     pipeline=pipeline, test_mode=test_mode))


def sthv2_pipeline(test_mode, resize, crop):
    return [dict(type='DecordInit', io_backend='disk'),
            dict(type='UniformSample', clip_len=8, test_mode=test_mode),
            dict(type='DecordDecode'), *resize, *crop,
            dict(type='FormatShape', input_format='NCTHW'), dict(type='PackActionInputs')]


sthv2_train_dataloader = sthv2_loader(
    'data/sthv2/sthv2_train_list_videos.txt',
    sthv2_pipeline(False, [dict(type='RandomRescale', scale_range=(256, 320))],
                   [dict(type='RandomCrop', size=224)]), 8, False)
sthv2_val_dataloader = sthv2_loader(
    'data/sthv2/sthv2_val_list_videos.txt',
    sthv2_pipeline(True, [dict(type='Resize', scale=(-1, 256))],
                   [dict(type='CenterCrop', crop_size=224)]), 8, True)
sthv2_test_dataloader = sthv2_loader(
    'data/sthv2/sthv2_val_list_videos.txt',
    sthv2_pipeline(True, [dict(type='Resize', scale=(-1, 224))],
                   [dict(type='ThreeCrop', crop_size=224)]), 1, True)
