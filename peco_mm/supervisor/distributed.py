"""torchrun for the standalone tools (tokenize_dataset.py, adversarial_eval.py), which run
without mmengine's Runner. They use mmengine.dist (ranks, barrier, all_reduce_dict); this module
keeps the two steps mmengine lacks: starting the process group on a CPU too, and leaving it."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
from mmengine import dist as mmdist


def init_from_env(device: str | None = None) -> tuple[int, int, str]:
    """(rank, world size, device). Under torchrun (WORLD_SIZE > 1) start the process group:
    NCCL on CUDA with device cuda:LOCAL_RANK, gloo on the CPU. One process: (0, 1, device)."""
    world = int(os.environ.get('WORLD_SIZE', '1'))
    if device is None:
        device = 'cuda' if torch.cuda.is_available() else 'cpu'
    if device == 'cuda' and world > 1:
        device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
    if device.startswith('cuda'):
        torch.cuda.set_device(torch.device(device))
    if world > 1 and not mmdist.is_distributed():
        # not mmengine's init_dist: it sets a CUDA device first, which fails on a CPU (gloo)
        dist.init_process_group('nccl' if device.startswith('cuda') else 'gloo')
    rank, world = mmdist.get_dist_info()
    return rank, world, device


def finish() -> None:
    """Wait for every rank, then leave the process group (a no-op in one process): the last
    call of a torchrun worker, so no rank exits while another still talks to it. mmengine.dist
    has no counterpart to torch's destroy_process_group."""
    if mmdist.is_distributed():
        mmdist.barrier()
        dist.destroy_process_group()
