"""Everything but the decoder for PeCo ViT-B/16 on ADE20K (PeCo appendix B): data, schedule,
optimizer, backbone. Leaf configs add an mmseg model base (UperNet, semantic FPN) and write
`model = dict(backbone=_base_.backbone, ...)`. The host's data preprocessor normalises as the
pretraining did (ImageNet mean / std, RGB; tests/test_config_pairs.py)."""
_base_ = [
    './ade20k_checked.py',
    'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_160k.py',
    '../models/peco_vit_b.py',
]
custom_imports = dict(imports=['peco_mm'], allow_failed_imports=False)
env_cfg = dict(dist_cfg=dict(timeout=600))  # a stalled rank ends the job after 10 min, not 30

# BN in the model; mmengine's Runner turns it into SyncBN only when distributed
# (Runner.wrap_model). `--cfg-options sync_bn=None` keeps plain BN; on CPU tools/train.py does
# that itself (SyncBN needs CUDA).
sync_bn = 'torch'
bn = dict(type='BN', requires_grad=True)

# BEiT-style ViT-B/16 as PeCo pretrains it; the shared relative-position table of a
# pretraining checkpoint is expanded per block and resized 14x14 -> 32x32 when loaded.
# Pretrained weights, one key (`--cfg-options model.backbone.init_cfg.checkpoint=PATH`): a PeCo
# pretraining checkpoint ('backbone.*' keys) or a file from tools/convert_checkpoint.py.
# `model.backbone.init_cfg=None` trains from scratch.
backbone = dict(
    _base_.vit_b,
    _delete_=True,  # the host model's ResNet -> PeCoViT
    img_size=(512, 512),
    drop_path_rate=0.2,
    out_type='featmap',  # out_indices default: blocks 4/6/8/12 -> strides 4/8/16/32
    final_norm=False,  # BEiT's dense heads take the raw block outputs
    pyramid=dict(norm_cfg=bn),
    init_cfg=dict(type='Pretrained',
                  checkpoint='work_dirs/pretrain_vitb_in1k_800e/epoch_800.pth'))

# AdamW 3e-4, wd 0.05, layer decay 0.65 over the 12 blocks (patch embedding: 0.65^13 = 0.0037x)
optim_wrapper = dict(
    type='AmpOptimWrapper',
    dtype='bfloat16',  # ours; on CPU see tools/train.py
    optimizer=dict(_delete_=True, type='AdamW', lr=3e-4, betas=(0.9, 0.999), weight_decay=0.05),
    constructor='LayerDecayOptimWrapperConstructor',
    paramwise_cfg=dict(layer_decay_rate=0.65))
# 1500 linear warm-up iterations, then linear decay to 0 at 160k (poly with power 1)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, by_epoch=False, begin=1500, end=160000),
]
# batch 16 = 8 GPUs x 2 images; 160k iterations x 16 images = 2.56M crops (~127 epochs)
train_dataloader = dict(batch_size=2)
recipe_gpus = 8  # the GPU count the lr is stated for: auto_scale_lr.base_batch_size = 8 x batch
# --auto-scale-lr: lr x (GPUs x batch_size) / 16, the total batch lr 3e-4 belongs to
auto_scale_lr = dict(base_batch_size=16, enable=False)
