"""Position tables: absolute position embeddings and BEiT relative-position bias.

Both are resized with torch (`F.interpolate`, bicubic), never with scipy's removed `interp2d`,
so a backbone pretrained at 224 px runs at 512×512 (segmentation) or any H×W (detection).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def resize_pos_embed(pos_embed: torch.Tensor, src_grid: tuple[int, int],
                     dst_grid: tuple[int, int], num_extra_tokens: int = 1) -> torch.Tensor:
    """Resize an absolute position table (1, extra + h*w, C) to another patch grid."""
    if tuple(src_grid) == tuple(dst_grid):
        return pos_embed
    n_src = src_grid[0] * src_grid[1]
    if pos_embed.shape[1] != num_extra_tokens + n_src:
        raise ValueError(f'pos_embed has {pos_embed.shape[1]} tokens, expected '
                         f'{num_extra_tokens} extra + {src_grid[0]}x{src_grid[1]} patches')
    extra, grid = pos_embed[:, :num_extra_tokens], pos_embed[:, num_extra_tokens:]
    C = grid.shape[-1]
    grid = grid.reshape(1, src_grid[0], src_grid[1], C).permute(0, 3, 1, 2)  # (1, C, h, w)
    grid = F.interpolate(grid.float(), size=tuple(dst_grid), mode='bicubic', align_corners=False)
    grid = grid.to(pos_embed.dtype).permute(0, 2, 3, 1).reshape(1, -1, C)  # (1, h'*w', C)
    return torch.cat([extra, grid], dim=1)


def relative_position_index(grid: tuple[int, int]) -> torch.Tensor:
    """BEiT's index into the bias table for a grid plus one cls token: (1+h*w, 1+h*w) long.

    Patch pairs index the (2h-1)*(2w-1) relative offsets; the last three entries of the
    table are cls->patch, patch->cls and cls->cls.
    """
    h, w = grid
    coords = torch.stack(torch.meshgrid(torch.arange(h), torch.arange(w), indexing='ij'))
    coords = coords.flatten(1)  # (2, h*w)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0)  # (h*w, h*w, 2)
    rel[:, :, 0] += h - 1
    rel[:, :, 1] += w - 1
    num_rel = (2 * h - 1) * (2 * w - 1)
    index = torch.zeros(h * w + 1, h * w + 1, dtype=torch.long)
    index[1:, 1:] = rel[:, :, 0] * (2 * w - 1) + rel[:, :, 1]
    index[0, 1:] = num_rel
    index[1:, 0] = num_rel + 1
    index[0, 0] = num_rel + 2
    return index


def resize_rel_pos_table(table: torch.Tensor, src_grid: tuple[int, int],
                         dst_grid: tuple[int, int]) -> torch.Tensor:
    """Resize a BEiT table ((2h-1)*(2w-1) + 3, heads) to another grid, keeping the 3 cls rows."""
    if tuple(src_grid) == tuple(dst_grid):
        return table
    sh, sw = 2 * src_grid[0] - 1, 2 * src_grid[1] - 1
    dh, dw = 2 * dst_grid[0] - 1, 2 * dst_grid[1] - 1
    if table.shape[0] != sh * sw + 3:
        raise ValueError(f'relative_position_bias_table has {table.shape[0]} rows, expected '
                         f'{sh * sw + 3} for a {src_grid[0]}x{src_grid[1]} grid')
    offsets, cls_rows = table[:-3], table[-3:]
    heads = table.shape[1]
    offsets = offsets.reshape(1, sh, sw, heads).permute(0, 3, 1, 2)  # (1, heads, sh, sw)
    offsets = F.interpolate(offsets.float(), size=(dh, dw), mode='bicubic', align_corners=False)
    offsets = offsets.to(table.dtype).permute(0, 2, 3, 1).reshape(dh * dw, heads)
    return torch.cat([offsets, cls_rows], dim=0)


class RelativePositionBias(nn.Module):
    """Learnable BEiT relative-position bias for one grid; returns (heads, 1+N, 1+N).

    At another grid (a larger image, a detection shape) the table is interpolated on the fly
    and the index rebuilt; the index is cached for the last `max_cached_grids` shapes.
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
