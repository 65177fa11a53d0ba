"""mmaction2's TimeSformer head with fp32 class scores, for bf16 mixed precision.

mmaction2's `BaseHead.loss_by_feat` computes its top-k accuracy in numpy
(`cls_scores.detach().cpu().numpy()`), and numpy has no bfloat16: under bf16 autocast (a CPU
with native bf16, or AMP with dtype bfloat16 on a GPU) the stock head fails with "Got
unsupported ScalarType BFloat16". This head returns its scores in fp32; everything else is
mmaction2's `TimeSformerHead` (same arguments, same weights).
"""
from __future__ import annotations

import torch
from mmaction.models.heads import TimeSformerHead

from ..registry import MODELS


@MODELS.register_module(force=True)  # replaces the stand-in registered by `import peco_mm`
class TimeSformerHeadFP32(TimeSformerHead):
    """`TimeSformerHead` whose class scores leave autocast as fp32: (B, num_classes)."""

    def forward(self, x: torch.Tensor, **kwargs) -> torch.Tensor:
        return super().forward(x, **kwargs).float()
