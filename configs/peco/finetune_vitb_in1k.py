# PeCo ViT-B/16 ImageNet-1K fine-tuning (paper Sec. 4.1): 100 epochs, 20 warm-up epochs to
# lr 4e-3, cosine to 0, layer decay 0.65, drop path 0.1, average pooling.
# BEiT's fine-tuning recipe from mmpretrain (RandAugment, RandomErasing 0.25, Mixup 0.8,
# CutMix 1.0, label smoothing 0.1) with PeCoViT as the backbone.
#
# Batch: the paper gives no fine-tuning batch; we use BEiT's 1024 = 8 GPUs x 128, at which
# lr 4e-3 is stated. `--auto-scale-lr`-style scaling is linear in the batch (auto_scale_lr).
#
#   tools/dist_train.sh configs/peco/finetune_vitb_in1k.py 8 \
#       --cfg-options model.backbone.init_cfg.checkpoint=PRETRAIN.pth
_base_ = [
    'mmpretrain::beit/benchmarks/beit-base-p16_8xb128-coslr-100e_in1k.py',
    '../_base_/models/peco_vit_b.py',
]
custom_imports = dict(imports=['peco_mm'], allow_failed_imports=False)
env_cfg = dict(dist_cfg=dict(timeout=600))  # a stalled rank ends the job after 10 min, not 30
recipe_gpus = 8  # the GPU count the lr is stated for: auto_scale_lr.base_batch_size = 8 x batch

data_root = 'data/imagenet'  # DATA_ROOT/{train,val}/<class>/*.JPEG (+ meta/*.txt)

# The pretraining's normalisation (ImageNet mean / std), not the host's 127.5 / 127.5, which
# belongs to the BEiT releases mmpretrain converts: with it the patch embedding would see
# about 0.45x the amplitude it was pretrained on (57.6 / 127.5).
data_preprocessor = dict(mean=_base_.vit_mean, std=_base_.vit_std)

model = dict(
    backbone=dict(
        _base_.vit_b,
        _delete_=True,  # the host's BEiTViT -> PeCoViT
        out_type='avg_featmap',
        final_norm=False,  # global average pooling + fc_norm
        # a PeCo pretraining checkpoint (configs/peco/pretrain_vitb_in1k_800e.py writes it),
        # or a converted / published one
        init_cfg=dict(type='Pretrained', prefix='backbone.',
                      checkpoint='work_dirs/pretrain_vitb_in1k_800e/epoch_800.pth')))

train_dataloader = dict(dataset=dict(data_root=data_root))
val_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = val_dataloader

optim_wrapper = dict(
    type='AmpOptimWrapper',
    dtype='bfloat16',  # ours (fp32 in the host config); on CPU see tools/train.py
    constructor='LayerDecayOptimWrapperConstructor',
    # BEiT's weight decay (the reference's): none for norms, biases, layer scales, the cls
    # token and absolute positions; the relative-position tables are decayed
    paramwise_cfg=dict(_delete_=True, layer_decay_rate=0.65))

# the paper decays to 0 (mmpretrain's BEiT recipe stops at 1e-6)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-4, by_epoch=True, begin=0, end=20,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', by_epoch=True, begin=20, end=100, eta_min=0.0,
         convert_to_iter_based=True),
]
