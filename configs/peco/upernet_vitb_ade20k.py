"""UperNet + auxiliary FCN head on PeCo ViT-B/16, ADE20K 512x512, 160k iterations (PeCo Sec. 4.2;
48.5 mIoU single-scale for the 800-epoch ViT-B).

    tools/dist_train.sh configs/peco/upernet_vitb_ade20k.py 8     # 8 GPUs x 2 images
    python tools/test.py configs/peco/upernet_vitb_ade20k.py CKPT  # single-scale mIoU
"""
_base_ = ['mmseg::_base_/models/upernet_r50.py', '../_base_/dense/peco_vit_ade20k_160k.py']

embed_dims = 768  # ViT-B width: every pyramid level has it
norm_cfg = _base_.bn  # the heads' SyncBN -> BN (+ sync_bn='torch' when distributed)
model = dict(
    pretrained=None,  # the base's ResNet weights; ours are backbone.init_cfg
    data_preprocessor=dict(size=(512, 512)),
    backbone=_base_.backbone,
    # BEiT's UperNet: 768 channels; the auxiliary FCN head on stride 16 (block 8), weight 0.4
    decode_head=dict(in_channels=[embed_dims] * 4, channels=768, num_classes=150,
                     norm_cfg=norm_cfg),
    auxiliary_head=dict(in_channels=embed_dims, in_index=2, num_classes=150, norm_cfg=norm_cfg),
    # single scale; 512 windows with stride 341 as BEiT, so the backbone sees its training grid
    test_cfg=dict(mode='slide', crop_size=(512, 512), stride=(341, 341)))
