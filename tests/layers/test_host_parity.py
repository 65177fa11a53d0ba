"""The ViT's small parts that we keep our own (importing timm costs about a second at every
ViT build) compute what timm's and mmpretrain's do, on the same weights and inputs."""
from __future__ import annotations

import pytest
import torch

from peco_mm.layers.attention import Mlp
from peco_mm.layers.pos_embed import relative_position_index, resize_pos_embed


@pytest.mark.parametrize('grid', [(14, 14), (4, 6), (1, 3), (16, 16)])
def test_relative_position_index_is_timms(grid):
    from timm.layers.pos_embed_rel import gen_relative_position_index
    ours = relative_position_index(grid)
    assert torch.equal(ours, gen_relative_position_index(grid, class_token=True))
    n = grid[0] * grid[1]
    assert ours.max() == (2 * grid[0] - 1) * (2 * grid[1] - 1) + 2 and ours.shape == (n + 1,) * 2


@pytest.mark.parametrize('dst', [(16, 16), (7, 7), (14, 20), (14, 14)])
def test_resize_pos_embed_is_timms_and_mmpretrains(dst):
    """Bicubic without antialiasing, as BEiT and mmpretrain resize (timm's default, with
    antialiasing, differs from both when shrinking and when growing)."""
    from mmpretrain.models.utils import resize_pos_embed as mmpretrain_resize
    from timm.layers import resample_abs_pos_embed
    torch.manual_seed(0)
    pe = torch.randn(1, 1 + 14 * 14, 8)
    ours = resize_pos_embed(pe, (14, 14), dst)
    assert ours.shape == (1, 1 + dst[0] * dst[1], 8) and torch.equal(ours[:, :1], pe[:, :1])
    timm_ref = resample_abs_pos_embed(pe, list(dst), (14, 14), num_prefix_tokens=1,
                                      antialias=False)
    torch.testing.assert_close(ours, timm_ref, rtol=0, atol=1e-6)
    torch.testing.assert_close(ours, mmpretrain_resize(pe, (14, 14), dst), rtol=0, atol=1e-6)


def test_mlp_is_timms_with_the_same_weight_names():
    from timm.layers import Mlp as TimmMlp
    torch.manual_seed(0)
    ours, ref = Mlp(16, 64), TimmMlp(16, 64)
    ref.load_state_dict(ours.state_dict())  # strict: fc1.*, fc2.* on both
    x = torch.randn(2, 5, 16)
    assert torch.equal(ours(x), ref(x))
