"""Position tables: absolute position embeddings and BEiT relative-position bias.

Absolute tables are resized with bicubic `F.interpolate`; relative-position tables with BEiT's
geometric-progression resize (the bicubic spline through offsets spaced 1, 1+q, 1+q+q^2, ...),
as unilm, mmseg and mmpretrain do, written as a linear map in torch (scipy's `interp2d`, which
those use, is gone). So a backbone pretrained at 224 px runs at 512×512 (segmentation) or any
H×W (detection).
"""
from __future__ import annotations

import functools
import math

import numpy as np
import torch
import torch.nn as nn


def patch_grid(img: torch.Tensor, patch_size: int) -> tuple[int, int]:
    """The (h, w) patch grid of an input (B, C, H, W), padded up to the patch size."""
    return (-(-img.shape[-2] // patch_size), -(-img.shape[-1] // patch_size))


def resize_pos_embed(pos_embed: torch.Tensor, src_grid: tuple[int, int],
                     dst_grid: tuple[int, int], num_extra_tokens: int = 1) -> torch.Tensor:
    """Resize an absolute position table (1, extra + h*w, C) to another patch grid: bicubic,
    no antialiasing, as BEiT and mmpretrain (timm's `resample_abs_pos_embed` with
    antialias=False); a table of another size than `src_grid` is an error naming both."""
    if tuple(src_grid) == tuple(dst_grid):
        return pos_embed
    n_src = src_grid[0] * src_grid[1]
    if pos_embed.shape[1] != num_extra_tokens + n_src:
        raise ValueError(f'pos_embed has {pos_embed.shape[1]} tokens, expected '
                         f'{num_extra_tokens} extra + {src_grid[0]}x{src_grid[1]} patches')
    from timm.layers import resample_abs_pos_embed
    return resample_abs_pos_embed(pos_embed, list(dst_grid), list(src_grid),
                                  num_prefix_tokens=num_extra_tokens, antialias=False)


def relative_position_index(grid: tuple[int, int]) -> torch.Tensor:
    """BEiT's index into the bias table for a grid plus one cls token: (1+h*w, 1+h*w) long.

    Patch pairs index the (2h-1)*(2w-1) relative offsets; the last three entries of the
    table are cls->patch, patch->cls and cls->cls: timm's `gen_relative_position_index` with
    class_token=True.
    """
    from timm.layers.pos_embed_rel import gen_relative_position_index
    return gen_relative_position_index(tuple(grid), class_token=True)


def geometric_offsets(src_side: int, dst_side: int) -> list[float]:
    """Positions of a table's `src_side` offsets on a `dst_side` axis (BEiT, Bao et al. 2022).

    Sides count offsets: a grid of h patches has 2h-1 of them, -(h-1)..h-1. Growing, BEiT
    spaces the source offsets in a geometric progression 1, 1+q, 1+q+q^2, ... whose ratio q
    (bisection in [1.01, 1.5]) makes the last one reach the new border: offsets near 0 stay
    almost 1:1 and the far ones spread. Not growing, the offsets stay where they are, so a
    smaller grid reads its own offsets unchanged (the central part of the table).
    """
    n, t = src_side // 2, dst_side // 2
    if dst_side <= src_side:
        return [float(i) for i in range(-n, n + 1)]

    def progression_sum(q: float) -> float:  # 1 + q + ... + q^(n-1)
        return (1.0 - q ** n) / (1.0 - q)

    lo, hi = 1.01, 1.5
    while hi - lo > 1e-6:
        q = (lo + hi) / 2.0
        if progression_sum(q) > t:
            hi = q
        else:
            lo = q
    pos, cur = [], 1.0
    for i in range(n):
        pos.append(cur)
        cur += q ** (i + 1)
    return [-p for p in reversed(pos)] + [0.0] + pos


@functools.lru_cache(maxsize=64)
def _spline_matrix(src_side: int, dst_side: int) -> np.ndarray:
    """(dst_side, src_side) matrix that evaluates, at the integer offsets of the new axis, the
    cubic interpolating spline through the source offsets at their `geometric_offsets`.

    The not-a-knot cubic spline is what FITPACK fits with s=0 (scipy's removed `interp2d`,
    `RectBivariateSpline(kx=3, ky=3, s=0)`); a tensor-product interpolating spline is the 1-D
    one applied along each axis, so a 2-D resize is `A_h @ table @ A_w.T`. As FITPACK does,
    new offsets outside the source range take the border value. Fewer than 4 offsets (a grid
    under 2x2) fall back to a lower degree.
    """
    from scipy.interpolate import make_interp_spline

    x = np.asarray(geometric_offsets(src_side, dst_side), dtype=np.float64)
    t = dst_side // 2
    new = np.clip(np.arange(-t, t + 1, dtype=np.float64), x[0], x[-1])
    if src_side == 1:
        return np.ones((dst_side, 1))
    spline = make_interp_spline(x, np.eye(src_side), k=min(3, src_side - 1))
    return spline(new)  # (dst_side, src_side)


def resize_rel_pos_table(table: torch.Tensor, src_grid: tuple[int, int],
                         dst_grid: tuple[int, int]) -> torch.Tensor:
    """Resize a BEiT table ((2h-1)*(2w-1) + 3, heads) to another grid, keeping the 3 cls rows.

    BEiT's geometric-progression resize (`geometric_offsets`, then the bicubic spline), per
    axis, as a linear map: differentiable, on the table's device, and equal to unilm / mmseg /
    mmpretrain's scipy version for square grids. An axis that does not grow keeps its offsets
    exactly (a smaller grid uses the central part of the table).
    """
    if tuple(src_grid) == tuple(dst_grid):
        return table
    sh, sw = 2 * src_grid[0] - 1, 2 * src_grid[1] - 1
    dh, dw = 2 * dst_grid[0] - 1, 2 * dst_grid[1] - 1
    if table.shape[0] != sh * sw + 3:
        raise ValueError(f'relative_position_bias_table has {table.shape[0]} rows, expected '
                         f'{sh * sw + 3} for a {src_grid[0]}x{src_grid[1]} grid')
    offsets, cls_rows = table[:-3], table[-3:]
    heads = table.shape[1]
    a_h = torch.as_tensor(_spline_matrix(sh, dh), dtype=torch.float64, device=table.device)
    a_w = torch.as_tensor(_spline_matrix(sw, dw), dtype=torch.float64, device=table.device)
    offsets = offsets.double().T.reshape(heads, sh, sw)  # (heads, sh, sw)
    offsets = a_h @ offsets @ a_w.T  # (heads, dh, dw)
    offsets = offsets.reshape(heads, dh * dw).T.to(table.dtype)  # (dh*dw, heads)
    return torch.cat([offsets, cls_rows], dim=0)


class RelativePositionBias(nn.Module):
    """Learnable BEiT relative-position bias for one grid; returns (heads, 1+N, 1+N).

    The table is learned at `grid` (the model's `img_size`; a checkpoint from another grid is
    resized once, at load). Another input grid (a detection batch's padded shape) gets the
    same geometric resize BEiT applies at load, `resize_rel_pos_table`, per axis: a fixed
    linear map per grid size, cached, applied to the current table, so the same grid always
    gives the same bias, gradients reach the learned table, and offsets near 0 keep (almost)
    their own bias whatever the padded shape. An axis that does not grow uses its offsets
    unchanged. The index is cached for the last `max_cached_grids` shapes.
    """

    max_cached_grids = 4

    def __init__(self, grid: tuple[int, int], num_heads: int) -> None:
        super().__init__()
        self.grid = tuple(grid)
        self.num_heads = num_heads
        num_rel = (2 * grid[0] - 1) * (2 * grid[1] - 1) + 3
        self.relative_position_bias_table = nn.Parameter(torch.zeros(num_rel, num_heads))
        self.register_buffer('relative_position_index', relative_position_index(self.grid),
                             persistent=False)
        self._index_cache: dict[tuple[int, int], torch.Tensor] = {}

    def forward(self, grid: tuple[int, int] | None = None) -> torch.Tensor:
        grid = self.grid if grid is None else tuple(grid)
        if grid == self.grid:
            table, index = self.relative_position_bias_table, self.relative_position_index
        else:
            table = resize_rel_pos_table(self.relative_position_bias_table, self.grid, grid)
            index = self._index_cache.pop(grid, None)
            if index is None or index.device != table.device:
                index = relative_position_index(grid).to(table.device)
            self._index_cache[grid] = index  # most recent last
            while len(self._index_cache) > self.max_cached_grids:
                # detection sees many padded shapes; an index at 800x1088 is ~100 MB
                self._index_cache.pop(next(iter(self._index_cache)))
        n = index.shape[0]
        bias = table[index.reshape(-1)].reshape(n, n, self.num_heads)  # (1+N, 1+N, heads)
        return bias.permute(2, 0, 1).contiguous()  # (heads, 1+N, 1+N)


REL_TABLE = 'relative_position_bias_table'


def rel_table_grid(rows: int, what: str = 'a relative-position table') -> tuple[int, int]:
    """The square grid whose BEiT table has `rows` rows ((2s-1)^2 offsets + 3 cls entries)."""
    side = (math.isqrt(max(rows - 3, 0)) + 1) // 2
    if rows < 4 or (2 * side - 1) ** 2 + 3 != rows:
        raise ValueError(f'cannot infer a square grid from {what} with {rows} rows; expected '
                         '(2s-1)^2 + 3')
    return side, side


def fit_position_tables(state_dict: dict, grid: tuple[int, int], num_layers: int | None = None,
                        prefix: str = '', num_extra_tokens: int = 1,
                        embed_dims: int | None = None) -> None:
    """Fit a checkpoint's position tables to `grid`, in place.

    With `num_layers`, a shared relative-position table (`rel_pos_bias.*`, BEiT pretraining) is
    copied into every block (`blocks.{i}.rel_pos_bias.*`, BEiT fine-tuning). A square absolute
    table (of width `embed_dims` when given) is resized bicubically; relative-position tables
    with BEiT's geometric resize (`resize_rel_pos_table`). Tables already at `grid` stay.
    """
    grid = tuple(grid)
    shared = f'{prefix}rel_pos_bias.{REL_TABLE}'
    if num_layers is not None and shared in state_dict:
        table = state_dict.pop(shared)
        for i in range(num_layers):
            state_dict.setdefault(f'{prefix}blocks.{i}.rel_pos_bias.{REL_TABLE}', table.clone())
    key = prefix + 'pos_embed'
    if key in state_dict:
        pe = state_dict[key]
        n = pe.shape[1] - num_extra_tokens
        side = math.isqrt(n)
        if side * side == n and (embed_dims is None or pe.shape[-1] == embed_dims):
            state_dict[key] = resize_pos_embed(pe, (side, side), grid, num_extra_tokens)
    rows = (2 * grid[0] - 1) * (2 * grid[1] - 1) + 3
    for k in list(state_dict):
        if k.startswith(prefix) and k.endswith(REL_TABLE) and state_dict[k].shape[0] != rows:
            src = rel_table_grid(state_dict[k].shape[0], k)
            state_dict[k] = resize_rel_pos_table(state_dict[k], src, grid)
