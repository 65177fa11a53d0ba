"""Timing a step: the median of timed steps after warm-up (synchronising CUDA), autocast by
name, and the GEMM rate of a device (the reference for model FLOP utilisation)."""
from __future__ import annotations

import contextlib
import statistics
import time
from typing import Callable

import torch


def time_steps(step: Callable[[], object], steps: int, warmup: int, device: str) -> list[float]:
    """Seconds of each of `steps` calls of `step` after `warmup` untimed ones."""
    cuda = device.startswith('cuda')
    times = []
    for i in range(warmup + steps):
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t)
    return times


def autocast(device: str, amp: str):
    """torch.autocast for 'bf16' / 'fp16', a null context for 'none'."""
    dtype = {'bf16': torch.bfloat16, 'fp16': torch.float16}.get(amp)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def gemm_gflops(device: str, dtype: torch.dtype = torch.float32, n: int = 2048) -> float:
    """This machine's fp32 (or `dtype`) matrix-multiply rate in GFLOP/s: the median of 5
    n x n products after one untimed, at the current thread count. It is the practical ceiling
    for the convolutions and linear layers that make up the models' FLOPs."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b, out = torch.randn_like(a), torch.empty_like(a)
    sec = statistics.median(time_steps(lambda: torch.mm(a, b, out=out), 5, 1, device))
    return 2 * n**3 / sec / 1e9
