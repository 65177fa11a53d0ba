"""bf16 mixed precision on any device, CPU included: `AutocastOptimWrapper`.

mmengine's `AmpOptimWrapper` asserts an accelerator (CUDA, NPU, MLU, MUSA) in its constructor,
so on a CPU it cannot be built at all. bf16 has fp32's exponent range and needs no loss scale,
so mixed precision on a CPU is only the autocast context around the forward pass and the loss:
`OptimWrapper` plus `torch.autocast(<the model's device>, bfloat16)` in `optim_context`.
The launcher (`peco_mm.supervisor.launch.cpu_mixed_precision`) puts it in place of an
`AmpOptimWrapper` config on a CPU that computes bf16 natively (`cpu_has_native_bf16`); on
CUDA the config's `AmpOptimWrapper` runs as mmengine ships it.

What autocast leaves in fp32 is decided per operator by torch (on CPU: normalisations,
softmax / log-softmax of fp32 inputs, the losses); where an fp32 result matters whatever the
input's dtype, the model casts itself (the quantizer's distances and EMA update, the MIM
head's logits before the cross-entropy).
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn as nn
from mmengine.optim import OptimWrapper

from ...registry import OPTIM_WRAPPERS

DTYPES = ('bfloat16', )


def model_device_type(model: nn.Module) -> str:
    """'cpu' / 'cuda' / ...: where the model's first parameter (or buffer) lives."""
    for t in model.parameters():
        return t.device.type
    for t in model.buffers():
        return t.device.type
    return 'cpu'


@OPTIM_WRAPPERS.register_module()
class AutocastOptimWrapper(OptimWrapper):
    """`OptimWrapper` whose forward pass runs under `torch.autocast` in `dtype` on the
    model's device (CPU or GPU), without a loss scale (bf16 does not underflow where fp32
    does not). Weights, gradients and optimizer state stay fp32.

    Args:
        dtype: 'bfloat16' (the only choice: fp16 needs the loss scale of `AmpOptimWrapper`).
        **kwargs: as `OptimWrapper` (optimizer, clip_grad, accumulative_counts).
    """

    def __init__(self, dtype: str | torch.dtype = 'bfloat16', **kwargs) -> None:
        name = str(dtype).replace('torch.', '')
        if name not in DTYPES:
            raise ValueError(f'AutocastOptimWrapper dtype={dtype!r}; allowed: {DTYPES} (fp16 '
                             "needs a loss scale: use AmpOptimWrapper on a GPU)")
        super().__init__(**kwargs)
        self.cast_dtype = getattr(torch, name)

    @contextmanager
    def optim_context(self, model: nn.Module):
        """The parent's context (no gradient sync while accumulating) and autocast."""
        with super().optim_context(model), torch.autocast(model_device_type(model),
                                                          dtype=self.cast_dtype):
            yield
