# Table 6, "classification loss on codewords" (82.9 top-1 after pretraining, against 84.1 for
# the perceptual loss): the explicit alternative to the perceptual loss, so lambda = 0 and a
# supervised loss on the codewords instead. The paper says only "supervised classification
# loss over the codewords". Ours: a linear classifier (mmpretrain LinearClsHead) on the
# average-pooled straight-through codewords against the ImageNet labels, cross-entropy with
# weight 1 (no weight is given), its gradient reaching the encoder as the pixel loss's does.
_base_ = './tokenizer_vqvae_in1k.py'
model = dict(perceptual_weight=0.0, codeword_loss='classification', codeword_loss_weight=1.0,
             codeword_loss_cfg=dict(num_classes=1000))
