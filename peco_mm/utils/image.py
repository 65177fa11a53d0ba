"""Images the core's hooks show: model outputs mapped back to uint8 and laid out as grids
(finding, reading and writing image files for the tools: peco_mm/tooling/images.py).

Normalisation is always `(pixel - mean) / std` on 0..255 RGB, as mmengine's data
preprocessors do it: the tokenizer's [-1, 1] range is `mean = std = 127.5` (`TOKENIZER_MEAN`,
`TOKENIZER_STD`, the defaults here), ImageNet normalisation is `IMAGENET_MEAN` /
`IMAGENET_STD`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

TOKENIZER_MEAN = (127.5, 127.5, 127.5)  # [-1, 1]
TOKENIZER_STD = (127.5, 127.5, 127.5)
IMAGENET_MEAN = (123.675, 116.28, 103.53)  # 0..255 RGB, as mmpretrain's configs
IMAGENET_STD = (58.395, 57.12, 57.375)


# ---- normalisation ---------------------------------------------------------------------------
def channel_stats(v: Sequence[float], ref: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(v, dtype=torch.float32, device=ref.device).view(3, 1, 1)


def to_uint8(x: torch.Tensor, mean: Sequence[float] = TOKENIZER_MEAN,
             std: Sequence[float] = TOKENIZER_STD) -> np.ndarray:
    """The inverse of `normalize`: float (3, H, W) or (B, 3, H, W) -> uint8 RGB (H, W, 3) or
    (B, H, W, 3), clipped to 0..255."""
    x = x.detach().float().cpu()
    x = x * channel_stats(std, x) + channel_stats(mean, x)
    return x.round().clamp(0, 255).to(torch.uint8).movedim(-3, -1).numpy()


# ---- grids -----------------------------------------------------------------------------------
def image_grid(rows: Sequence[torch.Tensor | np.ndarray], pad: int = 2,
               mean: Sequence[float] = TOKENIZER_MEAN,
               std: Sequence[float] = TOKENIZER_STD) -> np.ndarray:
    """One grid row per batch, on a white background with `pad` pixels between images:
    each row is a normalised float (B, 3, H, W) tensor (mapped back with `to_uint8`) or a uint8
    (B, H, W, 3) array. Returns (R(H + pad) + pad, Bmax(W + pad) + pad, 3) uint8 RGB."""
    rows = [to_uint8(r, mean, std) if isinstance(r, torch.Tensor) else np.asarray(r, np.uint8)
            for r in rows]
    H, W = rows[0].shape[1:3]
    if any(r.shape[1:] != (H, W, 3) for r in rows):
        raise ValueError(f'image_grid: every image must be {H}x{W} RGB, got row shapes '
                         f'{[r.shape for r in rows]}')
    from torchvision.utils import make_grid
    cols = max(len(r) for r in rows)
    white = np.full((1, H, W, 3), 255, np.uint8)  # fills the end of a shorter row
    tiles = np.concatenate([np.concatenate([r] + [white] * (cols - len(r))) for r in rows])
    grid = make_grid(torch.from_numpy(tiles).permute(0, 3, 1, 2), nrow=cols, padding=pad,
                     pad_value=255)  # (3, R(H + pad) + pad, cols(W + pad) + pad)
    return grid.permute(1, 2, 0).numpy()


def side_by_side_grid(img: torch.Tensor, recon: torch.Tensor, pad: int = 2) -> np.ndarray:
    """(B, 3, H, W) originals and reconstructions in [-1, 1] -> uint8 grid, originals on the
    top row, reconstructions below (the reconstruction hook and visualize_reconstructions)."""
    return image_grid([img, recon], pad)
