"""The ViT's small parts compute what the hosts' do, on the same weights and inputs: timm's
helpers where the ViT uses them (against mmpretrain's, and the outputs the parts they replaced
gave), the tokenizer's data preprocessor against mmengine's."""
from __future__ import annotations

import pytest
import torch

from peco_mm.layers.attention import Block
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


def test_the_blocks_mlp_is_timms_with_the_weight_names_and_outputs_it_had():
    """The block's MLP is timm's `Mlp` (it was a copy of it): the same weight names, and the
    output of the MLP it replaced, fc2(GELU(fc1(x)))."""
    from timm.layers import Mlp as TimmMlp
    torch.manual_seed(0)
    mlp = Block(16, 2, mlp_ratio=4.0).mlp
    assert type(mlp) is TimmMlp
    assert list(mlp.state_dict()) == ['fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias']
    x = torch.randn(2, 5, 16)
    before = mlp.fc2(torch.nn.functional.gelu(mlp.fc1(x)))
    assert torch.equal(mlp(x), before)


def test_tokenizer_preprocessor_is_mmengines_image_preprocessor_on_colour_batches():
    """On a batch of same-size BGR colour images, TokenizerDataPreprocessor gives exactly what
    mmengine's ImgDataPreprocessor gives with the tokenizer's mean / std and BGR -> RGB: pixels
    to [-1, 1]. Where they part (the reason ours is kept), ours refuses a batch of mixed sizes
    that mmengine would pad silently, and takes grey images as three channels."""
    from mmengine.model import ImgDataPreprocessor

    from peco_mm.tokenizer.preprocessor import TokenizerDataPreprocessor
    from peco_mm.utils.image import TOKENIZER_MEAN, TOKENIZER_STD
    g = torch.Generator().manual_seed(0)
    imgs = [torch.randint(0, 256, (3, 8, 12), generator=g, dtype=torch.uint8) for _ in range(3)]
    ours = TokenizerDataPreprocessor()(dict(inputs=imgs))['inputs']
    ref = ImgDataPreprocessor(mean=TOKENIZER_MEAN, std=TOKENIZER_STD,
                              bgr_to_rgb=True)(dict(inputs=imgs))['inputs']
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-6)
    assert ours.min() >= -1 and ours.max() <= 1
    mixed = imgs[:2] + [torch.zeros(3, 8, 16, dtype=torch.uint8)]
    assert ImgDataPreprocessor()(dict(inputs=mixed))['inputs'].shape == (3, 3, 8, 16)  # padded
    with pytest.raises(ValueError, match='differ in size'):
        TokenizerDataPreprocessor()(dict(inputs=mixed))
    grey = TokenizerDataPreprocessor()(dict(inputs=[imgs[0][:1]]))['inputs']
    assert grey.shape == (1, 3, 8, 12) and torch.equal(grey[0, 0], grey[0, 2])
