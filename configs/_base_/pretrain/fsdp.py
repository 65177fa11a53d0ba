# FSDP (PyTorch's FullyShardedDataParallel) through mmengine's FlexibleRunner: parameters,
# gradients and AdamW states are split over the GPUs. A leaf config adds this to the config
# it shards and sets `min_num_params` so that each transformer block is one FSDP unit.
runner_type = 'FlexibleRunner'
strategy = dict(
    type='FSDPStrategy',
    model_wrapper=dict(
        auto_wrap_policy=dict(type='torch.distributed.fsdp.wrap.size_based_auto_wrap_policy'),
        # the optimizer sees the original parameters (layer-wise lr / weight-decay groups),
        # and a unit may mix trainable weights with the frozen tokenizer's
        use_orig_params=True),
    # rank 0 writes one ordinary checkpoint, not one shard per rank, so the downstream configs
    # and tools/convert_checkpoint.py read it like any other
    state_dict_cfg='full')
