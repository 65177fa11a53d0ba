"""TimeSformer (divided space-time attention) on PeCo's ViT-B/16, Kinetics-400 (PeCo appendix,
Table 9: 76.5 top-1 from the 800-epoch ImageNet-1K PeCo model; BEiT 75.5, DeiT-B 75.4).

Paper: clips 8 x 224 x 224, patch 16, initialised from the ImageNet-1K pretraining, 15 epochs,
lr 1.2e-3, layer decay 0.65, weight decay 1e-4, batch 64. mmaction2's TimeSformer recipe for
the rest (its sampling 8 x 32, pipelines, VideoDataset, AccMetric, 3-crop test); what the paper
leaves open is marked "ours" below.

    tools/dist_train.sh configs/peco/timesformer_vitb_k400.py 8    # 8 GPUs x 8 clips
    python tools/test.py configs/peco/timesformer_vitb_k400.py CKPT
"""
_base_ = [
    'mmaction::recognition/timesformer/timesformer_divST_8xb8-8x32x1-15e_kinetics400-rgb.py',
    '../_base_/models/peco_vit_b.py',
]
custom_imports = dict(imports=['peco_mm'], allow_failed_imports=False)
env_cfg = dict(dist_cfg=dict(timeout=600))  # a stalled rank ends the job after 10 min, not 30
recipe_gpus = 8  # the GPU count the lr is stated for: auto_scale_lr.base_batch_size = 8 x batch

model = dict(
    # the pretraining's normalisation (ImageNet mean / std), not the host's 127.5 / 127.5
    data_preprocessor=dict(mean=_base_.vit_mean, std=_base_.vit_std),
    backbone=dict(
        _base_.vit_b,
        _delete_=True,  # the host's TimeSformer -> PeCo's ViT with divided attention
        type='PeCoTimeSformer',
        num_frames=8,
        out_type='avg_featmap',  # ours: BEiT's average pooling + fc_norm, as in fine-tuning
        final_norm=False,
        # the PeCo ImageNet-1K pretraining (configs/peco/pretrain_vitb_in1k_800e.py)
        init_cfg=dict(type='Pretrained', prefix='backbone.',
                      checkpoint='work_dirs/pretrain_vitb_in1k_800e/epoch_800.pth')),
    # mmaction2's head, with fp32 scores: its loss computes accuracy in numpy, which has no
    # bf16 (peco_mm/models/video_head.py)
    cls_head=dict(type='TimeSformerHeadFP32', num_classes=400))

optim_wrapper = dict(
    type='AmpOptimWrapper',
    dtype='bfloat16',  # ours; fp32 without CUDA (tools/train.py)
    # the paper's lr and weight decay at batch 64 = 8 GPUs x 8 clips; AdamW as BEiT fine-tunes
    optimizer=dict(_delete_=True, type='AdamW', lr=1.2e-3, betas=(0.9, 0.999),
                   weight_decay=1e-4),
    constructor='LayerDecayOptimWrapperConstructor',
    # no decay for norms, biases, layer scales, cls token and time_embed (BEiT's rule)
    paramwise_cfg=dict(_delete_=True, layer_decay_rate=0.65))

# ours (the paper gives no schedule): 2 warm-up epochs, then cosine to 0 over the 15 epochs
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, begin=0, end=2,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', by_epoch=True, begin=2, end=15, eta_min=0.0,
         convert_to_iter_based=True),
]
