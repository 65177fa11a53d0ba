"""Patch embedding: a strided convolution turning an image into a sequence of patch tokens."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class PatchEmbed(nn.Module):
    """Conv patchify; pads H and W up to a multiple of the patch size when asked to."""

    def __init__(self, patch_size: int, in_channels: int, embed_dims: int, pad: bool) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.pad = pad
        self.proj = nn.Conv2d(in_channels, embed_dims, patch_size, stride=patch_size)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        H, W = x.shape[-2:]
        p = self.patch_size
        if H % p or W % p:
            if not self.pad:
                raise ValueError(f'input size {H}x{W} is not divisible by patch_size={p}; '
                                 'resize the image or build PeCoViT with pad_to_patch=True')
            x = F.pad(x, (0, (p - W % p) % p, 0, (p - H % p) % p))
        x = self.proj(x)  # (B, C, h, w)
        grid = (x.shape[2], x.shape[3])
        return x.flatten(2).transpose(1, 2), grid  # (B, h*w, C)
