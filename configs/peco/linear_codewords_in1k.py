"""Table 4's codeword linear probe (PeCo 29.7 top-1, 10.2 without the perceptual loss): a linear
classifier on the average-pooled quantized codewords of a frozen tokenizer, trained on
ImageNet-1K train and tested on val, by mmpretrain (ImageClassifier, its data pipeline and
Accuracy). The paper gives no probe recipe; we take MAE's linear-probe protocol from
mmpretrain (BatchNorm without affine + linear head, LARS, 90 epochs, batch 16384), with the
tokenizer's input range ([-1, 1]) and D = 256 features.

    tools/dist_train.sh configs/peco/linear_codewords_in1k.py 8 \
        --cfg-options model.backbone.checkpoint=work_dirs/tokenizer_vqvae_in1k/epoch_100.pth
    # the pixel-only row: work_dirs/tokenizer_vqvae_lambda0_in1k/epoch_100.pth
"""
_base_ = 'mmpretrain::mae/benchmarks/vit-base-p16_8xb2048-linear-coslr-90e_in1k.py'
custom_imports = dict(imports=['peco_mm'], allow_failed_imports=False)
env_cfg = dict(dist_cfg=dict(timeout=600))  # a stalled rank ends the job after 10 min, not 30
recipe_gpus = 8  # the GPU count the lr is stated for: auto_scale_lr.base_batch_size = 8 x batch
# lr 6.4 belongs to the total batch 8 x 2048 = 16384 (the host config keeps 1024)
auto_scale_lr = dict(base_batch_size=recipe_gpus * 2048)

data_root = 'data/imagenet'
embed_dims = 256  # the codebook's D (configs/_base_/tokenizer/vqvae_cnn16.py)

# what the tokenizer was trained on: RGB in [-1, 1]
data_preprocessor = dict(mean=[127.5] * 3, std=[127.5] * 3)
model = dict(
    backbone=dict(_delete_=True, type='CodewordPoolBackbone',
                  checkpoint='work_dirs/tokenizer_vqvae_in1k/epoch_100.pth'),
    neck=dict(input_features=embed_dims),
    head=dict(in_channels=embed_dims))

train_dataloader = dict(dataset=dict(data_root=data_root))
val_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = val_dataloader

optim_wrapper = dict(dtype='bfloat16')  # the host's AmpOptimWrapper, bf16 instead of fp16
