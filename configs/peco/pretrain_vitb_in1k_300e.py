"""PeCo ViT-B/16 masked image modeling on ImageNet-1K, 300 epochs (paper Table 2: 84.1 top-1
after fine-tuning). Needs a trained tokenizer (configs/peco/tokenizer_vqvae_in1k.py).

    tools/dist_train.sh configs/peco/pretrain_vitb_in1k_300e.py 8 \
        --cfg-options model.target_generator.checkpoint=TOKENIZER.pth

The paper's settings: AdamW lr 1.5e-3, betas (0.9, 0.999), weight decay 0.05, drop path 0.1,
batch 2048 = 8 GPUs x 256. lr 1.5e-3 belongs to that total batch: on G GPUs x b images scale
it linearly, lr = 1.5e-3 x G*b / 2048 (add auto_scale_lr.enable=True to let mmengine do it).
"""
_base_ = [
    '../_base_/pretrain/peco_vitb.py',
    '../_base_/pretrain/mim_in1k.py',
    '../_base_/pretrain/adamw_mim.py',
]
