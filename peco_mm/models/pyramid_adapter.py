"""ViTPyramidAdapter: the 4-scale adapter that feeds a plain ViT to UperNet / FPN.

PeCo (appendix, following BEiT and Li et al. 2021): four ViT feature maps at stride 16 become
strides 4, 8, 16, 32 through 4x up (two stride-2 transposed convs with norm + GELU between),
2x up (one transposed conv), identity and 2x max-pool.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn
from mmengine.model import BaseModule

from ..registry import MODELS


def _norm(norm_cfg: dict, channels: int) -> nn.Module:
    kind = norm_cfg.get('type', 'BN')
    if kind == 'BN':
        return nn.BatchNorm2d(channels)
    if kind == 'SyncBN':
        return nn.SyncBatchNorm(channels)
    if kind == 'GN':
        return nn.GroupNorm(norm_cfg.get('num_groups', 32), channels)
    raise ValueError(f"norm_cfg type={kind!r}; allowed: 'BN', 'SyncBN', 'GN'")


def default_pyramid_indices(num_layers: int) -> tuple[int, int, int, int]:
    """Blocks feeding the four scales: 4/6/8/12 of 12 (1-based), scaled for ViT-L/H."""
    return tuple(round(num_layers * f) - 1 for f in (4 / 12, 6 / 12, 8 / 12, 1.0))


@MODELS.register_module()
class ViTPyramidAdapter(BaseModule):
    """Turn four (B, C, h, w) maps into a (stride 4, 8, 16, 32) pyramid with C channels each.

    Args:
        in_channels: ViT width C (an int, or four equal ints as mmdet/mmseg necks receive).
        scales: resize factor per input, from {4, 2, 1, 0.5}.
        norm_cfg: dict(type='BN' | 'SyncBN' | 'GN') used inside the 4x branch.
    """

    def __init__(self, in_channels: int | Sequence[int] = 768,
                 scales: Sequence[float] = (4, 2, 1, 0.5),
                 norm_cfg: dict | None = None, init_cfg: dict | None = None) -> None:
        super().__init__(init_cfg=init_cfg)
        if not isinstance(in_channels, int):
            if len(set(in_channels)) != 1:
                raise ValueError(f'in_channels={list(in_channels)}: a ViT gives equal widths')
            in_channels = int(in_channels[0])
        norm_cfg = norm_cfg or dict(type='BN')
        self.in_channels = in_channels
        self.scales = tuple(scales)
        C = in_channels
        branches = []
        for s in self.scales:
            if s == 4:
                branches.append(nn.Sequential(
                    nn.ConvTranspose2d(C, C, 2, stride=2), _norm(norm_cfg, C), nn.GELU(),
                    nn.ConvTranspose2d(C, C, 2, stride=2)))
            elif s == 2:
                branches.append(nn.ConvTranspose2d(C, C, 2, stride=2))
            elif s == 1:
                branches.append(nn.Identity())
            elif s == 0.5:
                branches.append(nn.MaxPool2d(2, stride=2))
            else:
                raise ValueError(f'scale {s} not supported; allowed: 4, 2, 1, 0.5')
        self.branches = nn.ModuleList(branches)

    def forward(self, feats: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        if len(feats) != len(self.branches):
            raise ValueError(f'ViTPyramidAdapter got {len(feats)} maps, expected '
                             f'{len(self.branches)}')
        return tuple(b(f) for b, f in zip(self.branches, feats))  # (B, C, h*s, w*s) each
