"""PeCo ViT-H/14, 800 epochs, at the paper's total batch with gradient accumulation, as
pretrain_vitl_in1k_800e_accum.py explains (on G GPUs: accumulative_counts = 2048 / (G x 64);
keep auto_scale_lr off; lr 1.5e-3 stays):

    2048 = 8 GPUs x 64 images x 4 accumulation steps
"""
_base_ = './pretrain_vith_in1k_800e.py'

train_dataloader = dict(batch_size=64)
optim_wrapper = dict(accumulative_counts=4)  # 2048 = 8 GPUs x 64 x 4
