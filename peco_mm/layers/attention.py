"""Transformer blocks for PeCoViT: fused attention, MLP, drop path, layer scale."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .pos_embed import RelativePositionBias

QKV_BIAS_CHOICES = ('qkv', 'qv', 'none')


class Attention(nn.Module):
    """Multi-head self-attention through `F.scaled_dot_product_attention`.

    qkv_bias: 'qkv' (ViT/MAE/MoCo v3), 'qv' (BEiT: learnable q and v bias, k bias fixed at 0)
    or 'none'. A relative-position bias (heads, N, N) enters as SDPA's additive mask.
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: str = 'qkv',
                 attn_drop: float = 0.0, proj_drop: float = 0.0) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f'embed_dims={dim} is not divisible by num_heads={num_heads}')
        if qkv_bias not in QKV_BIAS_CHOICES:
            raise ValueError(f'qkv_bias={qkv_bias!r}; allowed: {QKV_BIAS_CHOICES}')
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias == 'qkv')
        if qkv_bias == 'qv':
            self.q_bias = nn.Parameter(torch.zeros(dim))
            self.v_bias = nn.Parameter(torch.zeros(dim))
        else:
            self.q_bias = self.v_bias = None
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        B, N, C = x.shape
        if self.q_bias is not None:
            qkv_b = torch.cat([self.q_bias, torch.zeros_like(self.v_bias), self.v_bias])
            qkv = F.linear(x, self.qkv.weight, qkv_b)
        else:
            qkv = self.qkv(x)
        qkv = qkv.reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # (B, heads, N, head_dim) each
        if bias is not None:
            bias = bias.to(q.dtype)
        x = F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, dropout_p=self.attn_drop if self.training else 0.0)
        x = x.transpose(1, 2).reshape(B, N, C)  # (B, N, C)
        return self.proj_drop(self.proj(x))


class Block(nn.Module):
    """Pre-norm transformer block; optional layer scale (gamma_1/gamma_2) and own rel-pos bias."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, qkv_bias: str = 'qkv',
                 drop: float = 0.0, attn_drop: float = 0.0, drop_path: float = 0.0,
                 layer_scale_init_value: float = 0.0, norm_eps: float = 1e-6,
                 rel_pos_grid: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = Attention(dim, num_heads, qkv_bias, attn_drop, drop)
        # timm's stochastic depth and MLP (fc1, GELU, dropout, fc2, dropout); imported here,
        # at the first block built, not with peco_mm (timm takes about a second to import)
        from timm.layers import DropPath, Mlp
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop=drop)
        if layer_scale_init_value > 0:
            self.gamma_1 = nn.Parameter(layer_scale_init_value * torch.ones(dim))
            self.gamma_2 = nn.Parameter(layer_scale_init_value * torch.ones(dim))
        else:
            self.gamma_1 = self.gamma_2 = None
        # per-block BEiT relative-position bias (fine-tuning / dense tasks)
        if rel_pos_grid is not None:
            self.rel_pos_bias = RelativePositionBias(rel_pos_grid, num_heads)
        else:
            self.rel_pos_bias = None

    def forward(self, x: torch.Tensor, shared_bias: torch.Tensor | None = None,
                grid: tuple[int, int] | None = None) -> torch.Tensor:
        bias = shared_bias
        if self.rel_pos_bias is not None:
            bias = self.rel_pos_bias(grid)
        y = self.attn(self.norm1(x), bias)
        x = x + self.drop_path(y if self.gamma_1 is None else self.gamma_1 * y)
        y = self.mlp(self.norm2(x))
        return x + self.drop_path(y if self.gamma_2 is None else self.gamma_2 * y)
