# Paper appendix B: Adam beta (0.5, 0.95), lr 5e-5 at batch 128, 100 epochs, 5000 warm-up
# iterations. The paper states no decay after warm-up: the lr stays constant.
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='Adam', lr=5e-5, betas=(0.5, 0.95), weight_decay=0.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=False, begin=0, end=5000),
]
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=100)
auto_scale_lr = dict(base_batch_size=128, enable=False)  # --auto-scale-lr: linear in batch
