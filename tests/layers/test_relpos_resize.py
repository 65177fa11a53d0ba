"""BEiT's geometric-progression resize of relative-position tables, checked against unilm's
algorithm (re-stated here with scipy) and against mmpretrain's and mmseg's own functions."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.interpolate
import torch
from scipy.interpolate import RectBivariateSpline

from peco_mm.layers import RelativePositionBias, resize_rel_pos_table
from peco_mm.models import PeCoViT

TOL = 1e-4


def unilm_offsets(src_side: int, dst_side: int) -> np.ndarray:
    """unilm BEiT's source positions: geometric progression whose ratio is found by bisection."""
    n, t = src_side // 2, dst_side // 2
    left, right = 1.01, 1.5
    while right - left > 1e-6:
        q = (left + right) / 2.0
        if (1.0 - q ** n) / (1.0 - q) > t:
            right = q
        else:
            left = q
    dis, cur = [], 1.0
    for i in range(n):
        dis.append(cur)
        cur += q ** (i + 1)
    return np.array([-d for d in reversed(dis)] + [0.0] + dis)


def unilm_resize(table: torch.Tensor, src: tuple[int, int], dst: tuple[int, int]) -> torch.Tensor:
    """unilm's loop per head, with interp2d(kind='cubic') as RectBivariateSpline(s=0)."""
    sh, sw, dh, dw = 2 * src[0] - 1, 2 * src[1] - 1, 2 * dst[0] - 1, 2 * dst[1] - 1
    y, x = unilm_offsets(sh, dh), unilm_offsets(sw, dw)
    dy, dx = np.arange(-(dh // 2), dh // 2 + 1.0), np.arange(-(dw // 2), dw // 2 + 1.0)
    cols = []
    for i in range(table.shape[1]):
        z = table[:-3, i].reshape(sh, sw).double().numpy()  # rows: height offsets
        f = RectBivariateSpline(y, x, z, kx=3, ky=3, s=0)
        cols.append(torch.from_numpy(f(dy, dx)).reshape(-1, 1))
    return torch.cat([torch.cat(cols, 1).to(table.dtype), table[-3:]], 0)


def random_table(side: int, heads: int = 4, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn((2 * side - 1) ** 2 + 3, heads, generator=g)


@pytest.mark.parametrize('dst', [32, 20])
def test_matches_unilm_geometric_resize(dst):
    table = random_table(14)
    out = resize_rel_pos_table(table, (14, 14), (dst, dst))
    ref = unilm_resize(table, (14, 14), (dst, dst))
    assert out.shape == ((2 * dst - 1) ** 2 + 3, 4)
    assert (out - ref).abs().max() < TOL
    # cls->token, token->cls, cls->cls are copied, not interpolated
    torch.testing.assert_close(out[-3:], table[-3:], atol=0, rtol=0)
    # the offset 0 and the nearest offsets keep their own bias (uniform stretching would not)
    centre_src, centre_dst = 13 * 27 + 13, (dst - 1) * (2 * dst - 1) + dst - 1
    torch.testing.assert_close(out[centre_dst], table[centre_src], atol=TOL, rtol=0)


class Interp2dOnGrid:
    """scipy's removed interp2d(x, y, z, kind='cubic') on a grid: RectBivariateSpline(s=0)."""

    def __init__(self, x, y, z, kind='cubic'):
        assert kind == 'cubic'
        self.f = RectBivariateSpline(np.asarray(y), np.asarray(x), np.asarray(z), kx=3, ky=3,
                                     s=0)

    def __call__(self, x, y):
        return self.f(np.asarray(y), np.asarray(x))


@pytest.mark.parametrize('dst', [32, 20])
def test_matches_mmpretrain_and_mmseg(monkeypatch, dst):
    from mmpretrain.models.utils.embed import resize_relative_position_bias_table
    from mmseg.models.backbones.beit import BEiT
    monkeypatch.setattr(scipy.interpolate, 'interp2d', Interp2dOnGrid)
    table = random_table(14, seed=1)
    out = resize_rel_pos_table(table, (14, 14), (dst, dst))[:-3]
    ref_pretrain = resize_relative_position_bias_table(27, 2 * dst - 1, table[:-3], 4)
    ref_seg = BEiT._geometric_sequence_interpolation(None, 27, 2 * dst - 1, table[:-3], 4)
    assert (out - ref_pretrain).abs().max() < TOL
    assert (out - ref_seg).abs().max() < TOL


def test_non_square_grids_resize_each_axis():
    table = random_table(14, heads=2)
    out = resize_rel_pos_table(table, (14, 14), (20, 32))
    assert (out - unilm_resize(table, (14, 14), (20, 32))).abs().max() < TOL
    # an axis that does not grow keeps its offsets: 14x20 rows are the 14x14 rows along h
    out = resize_rel_pos_table(table, (14, 14), (14, 20)).reshape(-1, 2)[:-3]
    src = table[:-3].reshape(27, 27, 2)
    col = (39 - 1) // 2  # offset 0 along w
    torch.testing.assert_close(out.reshape(27, 39, 2)[:, col], src[:, 13], atol=TOL, rtol=0)
    # a smaller grid reads its own offsets: the central part of the table
    small = resize_rel_pos_table(table, (14, 14), (5, 7))[:-3].reshape(9, 13, 2)
    torch.testing.assert_close(small, src[13 - 4:13 + 5, 13 - 6:13 + 7], atol=TOL, rtol=0)


def test_detection_grid_same_bias_each_time_and_grad_reaches_table():
    rpb = RelativePositionBias((14, 14), num_heads=2)
    with torch.no_grad():
        rpb.relative_position_bias_table.copy_(random_table(14, heads=2))
    first = rpb((20, 32))
    rpb((18, 24))  # another padded shape in between
    again = rpb((20, 32))
    torch.testing.assert_close(again, first, atol=0, rtol=0)
    assert first.shape == (2, 1 + 20 * 32, 1 + 20 * 32)
    # the bias is the geometric resize of the current table, gathered by the grid's index
    resized = unilm_resize(rpb.relative_position_bias_table.detach(), (14, 14), (20, 32))
    idx = RelativePositionBias((20, 32), 2).relative_position_index
    expect = resized[idx.reshape(-1)].reshape(641, 641, 2).permute(2, 0, 1)
    assert (first.detach() - expect).abs().max() < TOL
    first.sum().backward()
    assert rpb.relative_position_bias_table.grad.abs().sum() > 0


def test_checkpoint_load_resizes_geometrically(tmp_path):
    """A 14x14-grid checkpoint loaded into a model built for a 20x20 grid (init_cfg and
    load_state_dict alike) holds unilm's geometric resize of the tables."""
    kw = dict(arch=dict(embed_dims=32, num_layers=1, num_heads=2), patch_size=4,
              qkv_bias='qv', use_abs_pos_emb=False, rel_pos_bias='per_block')
    src = PeCoViT(img_size=56, **kw)
    table = random_table(14, heads=2, seed=3)
    with torch.no_grad():
        src.blocks[0].rel_pos_bias.relative_position_bias_table.copy_(table)
    torch.save({'state_dict': src.state_dict()}, tmp_path / 'src.pth')
    expect = unilm_resize(table, (14, 14), (20, 20))
    dst = PeCoViT(img_size=80, init_cfg=dict(type='Pretrained',
                                             checkpoint=str(tmp_path / 'src.pth')), **kw)
    dst.init_weights()
    got = dst.blocks[0].rel_pos_bias.relative_position_bias_table.detach()
    assert (got - expect).abs().max() < TOL
    dst2 = PeCoViT(img_size=80, **kw)
    dst2.load_state_dict(src.state_dict())
    got = dst2.blocks[0].rel_pos_bias.relative_position_bias_table.detach()
    assert (got - expect).abs().max() < TOL
