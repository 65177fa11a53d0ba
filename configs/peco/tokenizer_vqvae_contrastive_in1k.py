# Table 6, "contrastive loss on codewords" (82.9 top-1 after pretraining, against 84.1 for the
# perceptual loss): lambda = 0 and "a momentum contrastive loss over the quantized codewords
# through data augmentation in a self-supervised way" -- all the paper says. Ours, MoCo v2's
# recipe on the average-pooled straight-through codewords: MLP projector 2048 -> 128,
# temperature 0.2, momentum 0.999 (mmengine's 0.001), a queue of 65536 keys, the key view drawn
# on the device with MoCo v2's augmentations, a momentum copy of the encoder quantising it with
# the shared codebook; weight 1 (no weight is given).
_base_ = './tokenizer_vqvae_in1k.py'
model = dict(perceptual_weight=0.0, codeword_loss='contrastive', codeword_loss_weight=1.0,
             codeword_loss_cfg=dict(queue_size=65536, proj_dims=128, hid_dims=2048,
                                    temperature=0.2, momentum=0.001))
