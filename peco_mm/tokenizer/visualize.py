"""Side-by-side grids of originals and reconstructions (the hook and
tools/visualize_reconstructions.py)."""
from __future__ import annotations

import numpy as np
import torch


def side_by_side_grid(img: torch.Tensor, recon: torch.Tensor, pad: int = 2) -> np.ndarray:
    """(B, 3, H, W) originals and reconstructions in [-1, 1] -> (2H + 3pad, B(W + pad) + pad, 3)
    uint8 RGB: originals on the top row, reconstructions below."""
    from .tokenizer import to_uint8
    B, _, H, W = img.shape
    grid = np.full((2 * H + 3 * pad, B * (W + pad) + pad, 3), 255, np.uint8)
    for row, batch in enumerate((img, recon)):
        for i in range(B):
            y, x = pad + row * (H + pad), pad + i * (W + pad)
            grid[y:y + H, x:x + W] = to_uint8(batch[i].detach().float()).permute(1, 2, 0).cpu()
    return grid
