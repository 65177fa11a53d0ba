"""Frozen networks held outside a module's tree (not trained, counted or saved with it) that
still move with it: they follow one of the module's registered buffers, which `.to()`,
`.cuda()`, `.half()` move through torch's public path."""
import itertools

import torch
from torch import nn


def follow_buffer(held: nn.Module, buffer: torch.Tensor) -> nn.Module:
    """`held` on `buffer`'s device, its floating tensors in `buffer`'s dtype (moved only when
    its first tensor is elsewhere); returns `held`."""
    first = next(itertools.chain(held.parameters(), held.buffers()), None)
    if first is not None and (first.device != buffer.device
                              or (first.is_floating_point() and first.dtype != buffer.dtype)):
        held.to(device=buffer.device, dtype=buffer.dtype)
    return held
