"""Which weights of a module hold NaN or inf."""
from __future__ import annotations

import torch


def nonfinite_names(module: torch.nn.Module) -> list[str]:
    """Names of the module's floating-point parameters and buffers holding NaN/inf."""
    tensors = list(module.named_parameters()) + list(module.named_buffers())
    return [n for n, t in tensors if t.is_floating_point() and not bool(torch.isfinite(t).all())]
