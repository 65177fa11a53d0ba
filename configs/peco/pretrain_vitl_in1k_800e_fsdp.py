"""PeCo ViT-L/16 pretraining sharded with FSDP (../_base_/pretrain/fsdp.py): parameters,
gradients and AdamW states are split over the GPUs (ViT-L: 303M parameters x 16 bytes = 4.9 GB
in fp32 with AdamW, 0.6 GB per GPU on 8), which leaves room for a larger per-GPU batch or
model. Otherwise pretrain_vitl_in1k_800e.py: the paper's recipe at 2048 = 8 GPUs x 256, bf16
autocast, with_cp.

    tools/dist_train.sh configs/peco/pretrain_vitl_in1k_800e_fsdp.py 8
"""
_base_ = ['./pretrain_vitl_in1k_800e.py', '../_base_/pretrain/fsdp.py']

# one FSDP unit per transformer block: a ViT-L block holds 12.6M parameters
# (12 x 1024^2 + 13 x 1024), its MLP 8.4M and its attention 4.2M, so a 10M threshold wraps
# whole blocks and nothing inside them
strategy = dict(model_wrapper=dict(auto_wrap_policy=dict(min_num_params=int(1e7))))

# Under FSDP, mmengine 0.10.7 clips each rank's gradient shard by that shard's own norm, not
# by the global norm BEiT's clipping at 3.0 uses: no clipping rather than a different one
# (ours; MAE pretrains ViT-L/H without clipping). pretrain_vitl_in1k_800e.py keeps it.
optim_wrapper = dict(clip_grad=None)
