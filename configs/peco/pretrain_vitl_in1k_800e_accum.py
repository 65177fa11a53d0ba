"""PeCo ViT-L/16, 800 epochs, at the paper's total batch 2048 on fewer GPUs or less memory: each
AdamW step sums the gradients of 4 forward/backward passes (mmengine's accumulative_counts;
each pass's loss is divided by 4, so the step sees the mean over all 2048 images):

    2048 = 8 GPUs x 64 images x 4 accumulation steps

On G GPUs set accumulative_counts = 2048 / (G x 64), e.g. 4 GPUs: 8, 16 GPUs: 2
(--cfg-options optim_wrapper.accumulative_counts=8). The total batch, hence lr 1.5e-3, stays
the paper's. Keep auto_scale_lr off: mmengine scales by GPUs x batch_size and does not count
the accumulation. with_cp stays on; where 64 images fit without it, --cfg-options
model.backbone.with_cp=False saves the recompute.
"""
_base_ = './pretrain_vitl_in1k_800e.py'

train_dataloader = dict(batch_size=64)
optim_wrapper = dict(accumulative_counts=4)  # 2048 = 8 GPUs x 64 x 4
