"""torchrun for the standalone tools (tokenize_dataset.py, adversarial_eval.py), which run
without mmengine's Runner: the process group from torchrun's environment, and sums over
ranks."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
from mmengine import dist as mmdist


def init_from_env(device: str | None = None) -> tuple[int, int, str]:
    """(rank, world size, device). Under torchrun (WORLD_SIZE > 1) start the process group:
    NCCL on CUDA with device cuda:LOCAL_RANK, gloo on the CPU. One process: (0, 1, device)."""
    world = int(os.environ.get('WORLD_SIZE', '1'))
    rank = int(os.environ.get('RANK', '0'))
    if device is None:
        device = 'cuda' if torch.cuda.is_available() else 'cpu'
    if device == 'cuda' and world > 1:
        device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
    if device.startswith('cuda'):
        torch.cuda.set_device(torch.device(device))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group('nccl' if device.startswith('cuda') else 'gloo')
    return rank, world, device


def sum_over_ranks(values: dict[str, float], device: str = 'cpu') -> dict[str, float]:
    """The element-wise sum of `values` over all ranks (itself in one process)."""
    if mmdist.get_world_size() == 1:
        return dict(values)
    t = torch.tensor(list(values.values()), dtype=torch.float64, device=device)
    mmdist.all_reduce(t, op='sum')
    return dict(zip(values, t.tolist()))


def barrier() -> None:
    mmdist.barrier()  # a no-op in one process


def finish() -> None:
    """Wait for every rank, then leave the process group (a no-op in one process): the last
    call of a torchrun worker, so no rank exits while another still talks to it."""
    if mmdist.is_distributed():
        mmdist.barrier()
        dist.destroy_process_group()
