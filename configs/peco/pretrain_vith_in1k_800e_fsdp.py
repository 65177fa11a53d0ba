"""PeCo ViT-H/14 pretraining sharded with FSDP, as pretrain_vitl_in1k_800e_fsdp.py explains
(ViT-H: 630M parameters x 16 bytes = 10.1 GB in fp32 with AdamW, 1.3 GB per GPU on 8).
Otherwise pretrain_vith_in1k_800e.py: 2048 = 8 GPUs x 256, bf16 autocast, with_cp.

    tools/dist_train.sh configs/peco/pretrain_vith_in1k_800e_fsdp.py 8
"""
_base_ = ['./pretrain_vith_in1k_800e.py', '../_base_/pretrain/fsdp.py']

# one FSDP unit per block: a ViT-H block holds 19.7M parameters (12 x 1280^2 + 13 x 1280),
# its MLP 13.1M, so the threshold sits between them at 15M
strategy = dict(model_wrapper=dict(auto_wrap_policy=dict(min_num_params=int(1.5e7))))

optim_wrapper = dict(clip_grad=None)  # see pretrain_vitl_in1k_800e_fsdp.py
