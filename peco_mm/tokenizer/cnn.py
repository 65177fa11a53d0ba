"""Convolutional VQ-VAE encoder and decoder of PeCo (appendix B of the paper): the first stage
has `base_channels` (64) channels, doubled at each downsample up to the multipliers given;
GroupNorm as in Taming Transformers (Esser et al. 2021); `num_res_blocks` residual blocks per
resolution; a self-attention block at the lowest resolution. The decoder is the encoder's
inverse. With channel_mult=(1, 2, 4, 8, 8) the encoder downsamples 16× (224 px -> 14×14 codes)
and holds 35.4M parameters; (1, 2, 4, 8) gives the 8× variant (112 px -> 14×14).
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..registry import MODELS


def group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(num_groups=math.gcd(32, channels), num_channels=channels, eps=1e-6)


class ResBlock(nn.Module):
    """GroupNorm-SiLU-conv ×2 with a 1×1 shortcut when the width changes."""

    def __init__(self, in_channels: int, out_channels: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm1 = group_norm(in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm2 = group_norm(out_channels)
        self.dropout = nn.Dropout(dropout)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.shortcut = (nn.Conv2d(in_channels, out_channels, 1)
                         if in_channels != out_channels else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(self.dropout(F.silu(self.norm2(h))))
        return self.shortcut(x) + h


class AttnBlock(nn.Module):
    """Single-head self-attention over the h×w positions, pre-GroupNorm, residual."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = group_norm(channels)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.proj = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(B, 3, C, H * W).transpose(-1, -2).unbind(1)
        h = F.scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1))
        h = h.squeeze(1).transpose(1, 2).reshape(B, C, H, W)  # (B, C, H, W)
        return x + self.proj(h)


class Downsample(nn.Module):
    """Stride-2 3×3 conv (asymmetric padding as in Taming: exact halving of even sizes)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class Upsample(nn.Module):
    """Nearest ×2 then 3×3 conv."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode='nearest'))


def _check(base_channels: int, channel_mult: Sequence[int], num_res_blocks: int) -> None:
    if base_channels < 1 or not channel_mult or any(m < 1 for m in channel_mult):
        raise ValueError(f'base_channels={base_channels}, channel_mult={tuple(channel_mult)}: '
                         'need a positive width and at least one positive multiplier')
    if num_res_blocks < 1:
        raise ValueError(f'num_res_blocks={num_res_blocks} must be >= 1')


@MODELS.register_module()
class CNNEncoder(nn.Module):
    """Image (B, 3, H, W) -> latents (B, code_dims, H/2^(S-1), W/2^(S-1)), S = stages."""

    def __init__(self, code_dims: int = 256, base_channels: int = 64,
                 channel_mult: Sequence[int] = (1, 2, 4, 8, 8), num_res_blocks: int = 2,
                 dropout: float = 0.0, in_channels: int = 3) -> None:
        super().__init__()
        _check(base_channels, channel_mult, num_res_blocks)
        widths = [base_channels * m for m in channel_mult]
        self.downsample = 2 ** (len(widths) - 1)
        self.conv_in = nn.Conv2d(in_channels, base_channels, 3, padding=1)
        stages = []
        c = base_channels
        for i, w in enumerate(widths):
            layers: list[nn.Module] = []
            for _ in range(num_res_blocks):
                layers.append(ResBlock(c, w, dropout))
                c = w
            if i < len(widths) - 1:
                layers.append(Downsample(c))
            stages.append(nn.Sequential(*layers))
        self.stages = nn.Sequential(*stages)
        # lowest resolution: residual, self-attention, residual
        self.mid = nn.Sequential(ResBlock(c, c, dropout), AttnBlock(c), ResBlock(c, c, dropout))
        self.norm_out = group_norm(c)
        self.conv_out = nn.Conv2d(c, code_dims, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.mid(self.stages(self.conv_in(x)))  # (B, C_top, h, w)
        return self.conv_out(F.silu(self.norm_out(h)))  # (B, code_dims, h, w)


@MODELS.register_module()
class CNNDecoder(nn.Module):
    """Latents (B, code_dims, h, w) -> image (B, 3, h·2^(S-1), w·2^(S-1)): encoder inverted."""

    def __init__(self, code_dims: int = 256, base_channels: int = 64,
                 channel_mult: Sequence[int] = (1, 2, 4, 8, 8), num_res_blocks: int = 2,
                 dropout: float = 0.0, out_channels: int = 3) -> None:
        super().__init__()
        _check(base_channels, channel_mult, num_res_blocks)
        widths = [base_channels * m for m in channel_mult]
        c = widths[-1]
        self.conv_in = nn.Conv2d(code_dims, c, 3, padding=1)
        self.mid = nn.Sequential(ResBlock(c, c, dropout), AttnBlock(c), ResBlock(c, c, dropout))
        stages = []
        for i, w in reversed(list(enumerate(widths))):
            layers: list[nn.Module] = []
            for _ in range(num_res_blocks):
                layers.append(ResBlock(c, w, dropout))
                c = w
            if i > 0:
                layers.append(Upsample(c))
            stages.append(nn.Sequential(*layers))
        self.stages = nn.Sequential(*stages)
        self.norm_out = group_norm(c)
        self.conv_out = nn.Conv2d(c, out_channels, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.stages(self.mid(self.conv_in(z)))  # (B, base_channels, H, W)
        return self.conv_out(F.silu(self.norm_out(h)))  # (B, 3, H, W)


def cnn_parts(base_channels: int = 64, channel_mult: Sequence[int] = (1, 2, 4, 8, 8),
              num_res_blocks: int = 2, dropout: float = 0.0, **quantizer) -> dict[str, dict]:
    """The part configs of a CNN tokenizer whose decoder mirrors its encoder:
    `PeCoTokenizer(**cnn_parts(16, (1, 2, 4), 1, num_embeddings=128, embed_dims=32))`;
    `quantizer` holds `EMAVectorQuantizer` arguments."""
    cnn = dict(base_channels=base_channels, channel_mult=tuple(channel_mult),
               num_res_blocks=num_res_blocks, dropout=dropout)
    return dict(encoder=dict(type='CNNEncoder', **cnn), decoder=dict(type='CNNDecoder', **cnn),
                quantizer=dict(type='EMAVectorQuantizer', **quantizer))
