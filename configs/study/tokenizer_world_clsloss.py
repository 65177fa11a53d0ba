# tools/study.py, Table 6's control ("classification loss on codewords", 82.9 against 84.1 for
# the perceptual loss on images): tokenizer_world.py with lambda = 0 and a linear classifier's
# cross-entropy on the average-pooled codewords (peco_mm/tokenizer/codeword_loss.py, weight 1 as
# configs/peco/tokenizer_vqvae_cls_in1k.py). Its labels are those the supervised perceptual
# network learns from, and no others: it trains on the labelled split of the classes A
# (world/perceptual/train, judge_per_class images per class) instead of the unlabeled images,
# and never reads a label of the held-out classes B. Tested like every tokenizer, on B.
_base_ = './tokenizer_world.py'

data_root = 'work_dirs/study/world'
model = dict(perceptual_weight=0, codeword_loss='classification', codeword_loss_weight=1.0,
             codeword_loss_cfg=dict(num_classes=5))  # the classes A
train_dataloader = dict(dataset=dict(data_root=data_root + '/perceptual', data_prefix='train',
                                     with_label=True))
