"""PeCo ViT-B/16, 800 epochs (paper Tables 1, 3: 84.5 IN-1K top-1, 48.5 ADE20K mIoU, 47.8/42.6 COCO
box/mask AP). Same recipe as the 300-epoch config; lr scaling as explained there.

    tools/dist_train.sh configs/peco/pretrain_vitb_in1k_800e.py 8 \
        --cfg-options model.target_generator.checkpoint=TOKENIZER.pth
"""
_base_ = './pretrain_vitb_in1k_300e.py'

max_epochs = 800
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-4, by_epoch=True, begin=0, end=10,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=10, end=max_epochs,
         convert_to_iter_based=True),
]
