"""PeCoViT options, checked numerically on a tiny model (width 64, depth 2, 32 px, patch 8)."""
import math

import pytest
import torch
import torch.nn.functional as F

from peco_mm.layers import Attention, relative_position_index, resize_pos_embed
from peco_mm.models import PeCoViT

TINY = dict(embed_dims=64, num_layers=2, num_heads=4)


def tiny(**kw):
    kw.setdefault('arch', TINY)
    kw.setdefault('img_size', 32)
    kw.setdefault('patch_size', 8)
    torch.manual_seed(0)
    m = PeCoViT(**kw)
    m.init_weights()
    return m.eval()


def test_attention_matches_explicit_softmax_with_bias():
    torch.manual_seed(0)
    attn = Attention(64, 4, qkv_bias='qv').eval()
    torch.nn.init.normal_(attn.q_bias)
    torch.nn.init.normal_(attn.v_bias)
    x = torch.randn(2, 17, 64)
    bias = torch.randn(4, 17, 17)
    out = attn(x, bias)
    # reference: k bias is zero, q/v biases are learned
    b = torch.cat([attn.q_bias, torch.zeros(64), attn.v_bias])
    q, k, v = F.linear(x, attn.qkv.weight, b).reshape(2, 17, 3, 4, 16).permute(2, 0, 3, 1, 4)
    w = (q @ k.transpose(-2, -1)) / math.sqrt(16) + bias
    ref = attn.proj((w.softmax(-1) @ v).transpose(1, 2).reshape(2, 17, 64))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_relative_position_index_closed_form():
    idx = relative_position_index((3, 3))
    assert idx.shape == (10, 10)
    # patch (0,0) -> patch (1,2): offset (-1,-2) -> ((-1+2)*5 + (-2+2)) = 5
    assert idx[1 + 0, 1 + 5].item() == 5
    assert idx[1 + 4, 1 + 4].item() == 2 * 5 + 2  # zero offset sits in the middle
    assert idx[0, 3].item() == 25 and idx[3, 0].item() == 26 and idx[0, 0].item() == 27


@pytest.mark.parametrize('mode', ['shared', 'per_block'])
def test_rel_pos_bias_zero_table_is_identity_and_nonzero_changes_output(mode):
    x = torch.randn(2, 3, 32, 32)
    plain = tiny()
    rel = tiny(rel_pos_bias=mode)
    rel.load_state_dict(plain.state_dict(), strict=False)
    torch.testing.assert_close(rel.forward_features(x), plain.forward_features(x))  # zero tables
    tables = [p for n, p in rel.named_parameters() if n.endswith('bias_table')]
    assert len(tables) == (1 if mode == 'shared' else 2)
    with torch.no_grad():
        for t in tables:
            t.normal_(std=1.0)
    assert (rel.forward_features(x) - plain.forward_features(x)).abs().max() > 1e-2


def test_shared_table_expands_per_block_with_equal_output():
    x = torch.randn(2, 3, 32, 32)
    shared = tiny(rel_pos_bias='shared')
    with torch.no_grad():
        shared.rel_pos_bias.relative_position_bias_table.normal_()
    per_block = tiny(rel_pos_bias='per_block')
    per_block.load_state_dict(shared.state_dict())
    torch.testing.assert_close(per_block.forward_features(x), shared.forward_features(x))


def test_non_square_and_other_size_inputs():
    m = tiny(out_type='featmap', out_indices=(0, 1), rel_pos_bias='per_block')
    outs = m(torch.randn(1, 3, 48, 80))
    assert [o.shape for o in outs] == [(1, 64, 6, 10)] * 2
    # a size not divisible by the patch is padded ...
    assert m(torch.randn(1, 3, 30, 41))[0].shape == (1, 64, 4, 6)
    # ... or refused when padding is off
    strict = tiny(pad_to_patch=False)
    with pytest.raises(ValueError, match='not divisible by patch_size=8'):
        strict(torch.randn(1, 3, 30, 32))


def test_loading_at_another_size_equals_on_the_fly_resizing():
    """A 32 px checkpoint loaded into a 48 px model gives the same features as the 32 px model
    resizing its tables on the fly for a 48 px input."""
    src = tiny(rel_pos_bias='per_block')
    with torch.no_grad():
        for n, p in src.named_parameters():
            if n.endswith('bias_table'):
                p.normal_()
    dst = tiny(rel_pos_bias='per_block', img_size=48)
    dst.load_state_dict(src.state_dict())
    assert dst.pos_embed.shape == (1, 1 + 36, 64)
    x = torch.randn(2, 3, 48, 48)
    torch.testing.assert_close(dst.forward_features(x), src.forward_features(x), atol=1e-5,
                               rtol=1e-5)


def test_resize_pos_embed_constant_stays_constant():
    pe = torch.cat([torch.zeros(1, 1, 8), torch.full((1, 16, 8), 3.0)], dim=1)
    out = resize_pos_embed(pe, (4, 4), (3, 5))
    assert out.shape == (1, 16, 8)
    torch.testing.assert_close(out[:, 1:], torch.full((1, 15, 8), 3.0))


def test_out_types():
    x = torch.randn(2, 3, 32, 32)
    raw = tiny().forward_features(x)  # (B, 1+N, C) after the final norm
    cls = tiny(out_type='cls_token')(x)[0]
    torch.testing.assert_close(cls, raw[:, 0])
    avg = tiny(out_type='avg_featmap', final_norm=False)
    tokens = avg.forward_features(x)  # final_norm=False: no norm before pooling
    ref = F.layer_norm(tokens[:, 1:].mean(1), (64,), avg.fc_norm.weight, avg.fc_norm.bias, 1e-6)
    torch.testing.assert_close(avg(x)[0], ref)


def test_mask_token_replaces_masked_patches():
    m = tiny(use_mask_token=True, use_abs_pos_emb=False)
    x = torch.randn(2, 3, 32, 32)
    mask = torch.zeros(2, 16, dtype=torch.bool)
    mask[:, :5] = True
    tokens, grid = m.embed(x, mask)
    assert grid == (4, 4)
    torch.testing.assert_close(tokens[:, 1:6], m.mask_token.expand(2, 5, 64))
    unmasked, _ = m.embed(x)
    torch.testing.assert_close(tokens[:, 6:], unmasked[:, 6:])
    with pytest.raises(ValueError, match='use_mask_token=False'):
        tiny().embed(x, mask)


def test_get_layer_depth_rule():
    m = tiny(rel_pos_bias='shared', use_mask_token=True)
    L2 = 2 + 2
    expect = {
        'cls_token': 0, 'mask_token': 0, 'pos_embed': 0, 'patch_embed.proj.weight': 0,
        'blocks.0.attn.qkv.weight': 1, 'blocks.1.mlp.fc2.bias': 2, 'norm.weight': 3,
        'rel_pos_bias.relative_position_bias_table': 3,
    }
    for name, depth in expect.items():
        assert m.get_layer_depth(name) == (depth, L2), name
    assert m.get_layer_depth('backbone.blocks.1.norm1.weight', 'backbone.') == (2, L2)
    assert m.get_layer_depth('decode_head.conv.weight', 'backbone.') == (3, L2)


def test_no_weight_decay_set():
    m = tiny(rel_pos_bias='per_block', use_mask_token=True, layer_scale_init_value=0.1,
             qkv_bias='qv')
    nwd = m.no_weight_decay()
    assert {'cls_token', 'pos_embed', 'blocks.1.attn.q_bias', 'blocks.0.gamma_1',
            'norm.weight', 'norm.bias', 'blocks.0.mlp.fc1.bias'} <= nwd
    # BEiT decays the [MASK] token and the relative-position tables
    assert not {'blocks.0.attn.qkv.weight', 'patch_embed.proj.weight', 'mask_token',
                'blocks.1.mlp.fc2.weight', 'blocks.0.rel_pos_bias.relative_position_bias_table'
                } & nwd


def test_frozen_stages_linear_probe():
    m = tiny(frozen_stages=2)
    assert not any(p.requires_grad for p in m.parameters())
    m.train()
    assert not m.blocks[0].training and not m.norm.training
    half = tiny(frozen_stages=1)
    assert not half.blocks[0].attn.qkv.weight.requires_grad
    assert half.blocks[1].attn.qkv.weight.requires_grad and half.norm.weight.requires_grad


@pytest.mark.parametrize('kwargs, msg', [
    (dict(arch='bse'), "arch='bse'; allowed"),
    (dict(qkv_bias='kv'), "qkv_bias='kv'; allowed"),
    (dict(rel_pos_bias='yes'), "rel_pos_bias='yes'"),
    (dict(out_type='tokens'), "out_type='tokens'; allowed"),
    (dict(out_indices=(5,)), 'out_indices entry 5 is out of range'),
    (dict(img_size=30), 'not divisible by patch_size=8'),
    (dict(pyramid=dict()), "pyramid needs out_type='featmap'"),
])
def test_bad_arguments_name_what_is_allowed(kwargs, msg):
    with pytest.raises(ValueError, match=msg.replace('(', r'\(').replace(')', r'\)')):
        tiny(**kwargs)


def test_width_mismatch_checkpoint_names_both():
    src = PeCoViT(arch=dict(embed_dims=32, num_layers=2, num_heads=4), img_size=32,
                  patch_size=8)
    with pytest.raises(ValueError, match='checkpoint width 32 .* embed_dims=64'):
        tiny().load_state_dict(src.state_dict())


def test_presets_have_paper_sizes():
    m = PeCoViT(arch='base')
    n = sum(p.numel() for p in m.parameters())
    assert 85.5e6 < n < 86.5e6  # ViT-B/16 without head: 85.8M
    assert PeCoViT(arch='large', patch_size=14).num_layers == 24


def test_non_square_model_reloads_its_own_state():
    m = tiny(img_size=(32, 48), rel_pos_bias='per_block')
    with torch.no_grad():
        m.blocks[0].rel_pos_bias.relative_position_bias_table.normal_()
    m2 = tiny(img_size=(32, 48), rel_pos_bias='per_block')
    m2.load_state_dict(m.state_dict())
    x = torch.randn(1, 3, 32, 48)
    torch.testing.assert_close(m2.forward_features(x), m.forward_features(x))


def test_shallow_model_feeds_the_pyramid_with_repeated_blocks():
    m = tiny(out_type='featmap', pyramid=dict(norm_cfg=dict(type='GN', num_groups=8)))
    assert m.out_indices == [0, 0, 0, 1]
    outs = m(torch.randn(1, 3, 32, 32))
    assert [tuple(o.shape[-2:]) for o in outs] == [(16, 16), (8, 8), (4, 4), (2, 2)]
    # the 1x branch is the identity on block 0's map
    raw = tiny(out_type='featmap', out_indices=(0, ))(torch.randn(1, 3, 32, 32))
    assert raw[0].shape == outs[2].shape


def test_rel_pos_index_cache_is_bounded():
    m = tiny(rel_pos_bias='shared')
    for w in range(40, 120, 8):
        m(torch.randn(1, 3, 32, w))
    assert len(m.rel_pos_bias._index_cache) == m.rel_pos_bias.max_cached_grids
