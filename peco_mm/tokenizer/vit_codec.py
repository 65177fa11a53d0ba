"""ViT encoder and inverse-ViT decoder for the tokenizer ablation of PeCo (Table 12, appendix:
"for ViT-base encoder, we use the original structure, and use the inverse version of ViT as
decoder"). Encoder: PeCoViT patch tokens (16×16 patches) projected to the codebook width.
Decoder: codewords projected to tokens, transformer blocks, then a linear layer to the pixels
of each patch (the patchify step inverted).
"""
from __future__ import annotations

import torch
import torch.nn as nn
from torch.nn.init import trunc_normal_

from ..layers import Block
from ..models.vit import PeCoViT
from ..models.vit_config import ARCH_ZOO
from ..registry import MODELS
from .perceptual import quiet_init_weights


@MODELS.register_module()
class ViTEncoder(nn.Module):
    """(B, 3, H, W) -> (B, code_dims, H/p, W/p)."""

    def __init__(self, code_dims: int, **vit_cfg) -> None:
        super().__init__()
        cfg = dict(arch='base', img_size=224, patch_size=16)
        cfg.update(vit_cfg)
        self.vit = PeCoViT(**cfg)
        quiet_init_weights(self.vit)
        self.downsample = self.vit.patch_size
        self.proj = nn.Conv2d(self.vit.embed_dims, code_dims, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the last block's patch tokens after the final norm
        feats = self.vit.forward_intermediates(x, [-1], norm=True, output_fmt='NCHW')[0]
        return self.proj(feats)  # (B, D, h, w)


@MODELS.register_module()
class ViTDecoder(nn.Module):
    """(B, code_dims, h, w) -> (B, 3, h·p, w·p): tokens, blocks, per-patch pixel head."""

    def __init__(self, code_dims: int, arch: str | dict = 'base', img_size: int = 224,
                 patch_size: int = 16, num_layers: int | None = None,
                 embed_dims: int | None = None, num_heads: int | None = None,
                 mlp_ratio: float | None = None, **_encoder_only) -> None:
        super().__init__()
        a = dict(ARCH_ZOO[arch]) if isinstance(arch, str) else dict(arch)
        width = embed_dims or a['embed_dims']
        depth = num_layers or a['num_layers']
        heads = num_heads or a['num_heads']
        self.patch_size = patch_size
        self.grid = img_size // patch_size
        self.proj_in = nn.Linear(code_dims, width)
        self.pos_embed = nn.Parameter(torch.zeros(1, self.grid * self.grid, width))
        self.blocks = nn.ModuleList(Block(width, heads, mlp_ratio or a.get('mlp_ratio', 4.0))
                                    for _ in range(depth))
        self.norm = nn.LayerNorm(width, eps=1e-6)
        self.head = nn.Linear(width, patch_size * patch_size * 3)
        trunc_normal_(self.pos_embed, std=0.02)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        from ..layers import resize_pos_embed
        B, D, h, w = z.shape
        x = self.proj_in(z.flatten(2).transpose(1, 2))  # (B, h*w, C)
        x = x + resize_pos_embed(self.pos_embed, (self.grid, self.grid), (h, w), 0)
        for blk in self.blocks:
            x = blk(x)
        x = self.head(self.norm(x))  # (B, h*w, p*p*3)
        p = self.patch_size
        x = x.view(B, h, w, p, p, 3).permute(0, 5, 1, 3, 2, 4)  # (B, 3, h, p, w, p)
        return x.reshape(B, 3, h * p, w * p)
