"""Data-loader workers per GPU from the machine (`num_workers='auto'` in a config): every core
of a rank's share but one, which the training process itself keeps (the step's Python, the
batches' pinning). docs/benchmarks.md ("The input pipeline by transform") gives the
measurements behind it."""
from __future__ import annotations

import os

AUTO = 'auto'


def cores_per_gpu() -> int:
    """The CPU cores this process may use, over the ranks of this machine (torchrun's
    LOCAL_WORLD_SIZE), else over its visible GPUs (all cores without CUDA)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
    ranks = int(os.environ.get('LOCAL_WORLD_SIZE', 0) or 0)
    if not ranks:
        import torch
        ranks = torch.cuda.device_count()
    return max(1, (cores or 1) // max(1, ranks))


def default_workers(cores: int) -> int:
    """Workers for a rank with `cores` cores: all but one, at least one."""
    return max(1, cores - 1)


def resolve_workers(cfg) -> None:
    """Each data loader of `cfg` with `num_workers='auto'` gets `default_workers` of this
    machine's `cores_per_gpu`, in place; any other value is the config's and stays."""
    for key in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        loader = cfg.get(key)
        if isinstance(loader, dict) and loader.get('num_workers') == AUTO:
            loader['num_workers'] = default_workers(cores_per_gpu())
