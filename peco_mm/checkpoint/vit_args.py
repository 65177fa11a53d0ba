"""Step 4 of converting a checkpoint into PeCoViT weights: the PeCoViT arguments read off the
weights' shapes (width, depth, heads, patch size, biases, position tables, image size), and
the position tables adapted (the [CLS] position added, tables resized to another image size,
a shared relative-position table expanded per block)."""
from __future__ import annotations

import math
import re

import torch

from ..layers.pos_embed import REL_TABLE, fit_position_tables, rel_table_grid

# layer-scale value written into the inferred arguments; the checkpoint's gammas replace it
DEFAULT_LAYER_SCALE = 0.1


def infer_pecovit_kwargs(sd: dict, img_size: int | tuple[int, int] | None = None
                         ) -> tuple[dict, list[str]]:
    """PeCoViT arguments matching a PeCoViT-named state dict; also notes on what was guessed."""
    notes: list[str] = []
    embed_dims, in_channels, patch_size = _patch_embedding(sd)
    num_layers, mlp_ratio = _blocks(sd, embed_dims)
    num_heads, rel_pos_bias, qkv_bias = _attention(sd, embed_dims, notes)
    img_size = _image_size(sd, patch_size, img_size, notes)
    kwargs = dict(
        arch=dict(embed_dims=int(embed_dims), num_layers=num_layers, num_heads=int(num_heads),
                  mlp_ratio=float(mlp_ratio)),
        img_size=img_size[0] if img_size[0] == img_size[1] else img_size,
        patch_size=int(patch_size),
        qkv_bias=qkv_bias,
        use_abs_pos_emb='pos_embed' in sd,
        rel_pos_bias=rel_pos_bias,
        layer_scale_init_value=DEFAULT_LAYER_SCALE if 'blocks.0.gamma_1' in sd else 0.0,
        final_norm='norm.weight' in sd,
    )
    if 'fc_norm.weight' in sd:
        kwargs['out_type'] = 'avg_featmap'  # fc_norm exists only for pooled outputs
    if 'mask_token' in sd:
        kwargs['use_mask_token'] = True
    if in_channels != 3:
        kwargs['in_channels'] = int(in_channels)
    return kwargs, notes


def _patch_embedding(sd: dict) -> tuple[int, int, int]:
    """(embed_dims, in_channels, patch_size) from the patch embedding's convolution."""
    if 'patch_embed.proj.weight' not in sd:
        raise ValueError('no patch embedding found (patch_embed.proj.weight after renaming); '
                         f'keys: {list(sd)[:12]}')
    w = sd['patch_embed.proj.weight']  # (C, in_ch, p, p)
    if w.ndim != 4 or w.shape[-1] != w.shape[-2]:
        raise ValueError(f'patch_embed.proj.weight has shape {tuple(w.shape)}; expected a '
                         'square (C, in_channels, p, p) convolution')
    return w.shape[0], w.shape[1], w.shape[-1]


def _blocks(sd: dict, embed_dims: int) -> tuple[int, float]:
    """(num_layers, mlp_ratio) from the blocks' keys and the first MLP."""
    block_ids = {int(m.group(1)) for k in sd if (m := re.match(r'blocks\.(\d+)\.', k))}
    if not block_ids:
        raise ValueError('no transformer blocks found (blocks.N.* after renaming)')
    if 'cls_token' not in sd:
        raise ValueError('the checkpoint has no cls_token; PeCoViT always has one '
                         '(class_token=False / register-token models are not supported)')
    if 'blocks.0.mlp.fc1.weight' not in sd:
        raise ValueError('blocks.0.mlp.fc1.weight missing after renaming')
    return max(block_ids) + 1, sd['blocks.0.mlp.fc1.weight'].shape[0] / embed_dims


def _attention(sd: dict, embed_dims: int, notes: list[str]) -> tuple[int, str, str]:
    """(num_heads, rel_pos_bias, qkv_bias): the heads from a relative-position table (one
    column per head), else guessed as embed_dims // 64 with a note."""
    tables = [k for k in sd if k.endswith(REL_TABLE)]
    if tables:
        num_heads = sd[tables[0]].shape[1]
    else:
        num_heads = max(embed_dims // 64, 1)
        notes.append(f'num_heads={num_heads} is a guess (embed_dims // 64): the weights do '
                     'not record it; override it if the source model used another value')
    rel_pos_bias = ('shared' if 'rel_pos_bias.' + REL_TABLE in sd else
                    'per_block' if tables else 'none')
    qkv_bias = ('qv' if 'blocks.0.attn.q_bias' in sd else
                'qkv' if 'blocks.0.attn.qkv.bias' in sd else 'none')
    return num_heads, rel_pos_bias, qkv_bias


def _image_size(sd: dict, patch_size: int, img_size, notes: list[str]) -> tuple[int, int]:
    """The given size, else the source's patch grid times the patch, else 224 with a note."""
    if img_size is None:
        src_grid = _source_grid(sd)
        if src_grid is None:
            notes.append('img_size=224 assumed: no position table records the grid')
            return (224, 224)
        return (src_grid[0] * patch_size, src_grid[1] * patch_size)
    return (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)


def _source_grid(sd: dict) -> tuple[int, int] | None:
    if 'pos_embed' in sd:
        return _square_grid(sd['pos_embed'].shape[1] - 1, 'pos_embed')
    for k in sd:
        if k.endswith(REL_TABLE):
            return rel_table_grid(sd[k].shape[0], k)
    return None


def _square_grid(n: int, what: str) -> tuple[int, int]:
    side = math.isqrt(n)
    if side * side != n:
        raise ValueError(f'{what} holds {n} patch positions, not a square grid')
    return side, side


def add_cls_position(sd: dict, notes: list[str]) -> None:
    """timm `no_embed_class` tables have no cls slot; a zero one is equivalent (in place)."""
    pe = sd.get('pos_embed')
    if pe is not None and 'cls_token' in sd and math.isqrt(pe.shape[1]) ** 2 == pe.shape[1]:
        sd['pos_embed'] = torch.cat([pe.new_zeros(1, 1, pe.shape[2]), pe], dim=1)
        notes.append('pos_embed had no cls slot (timm no_embed_class): a zero one was '
                     'prepended, which is equivalent')


def adapt_tables(sd: dict, kwargs: dict, img_size: int | tuple[int, int] | None,
                 per_block_rel_pos: bool, notes: list[str]) -> None:
    """In place: expand a shared relative-position table per block, resize position tables
    to `img_size` (`fit_position_tables`, the adapter PeCoViT loads through)."""
    src = _source_grid(sd)
    if per_block_rel_pos and 'rel_pos_bias.' + REL_TABLE in sd:
        fit_position_tables(sd, src, num_layers=kwargs['arch']['num_layers'])
        kwargs['rel_pos_bias'] = 'per_block'
        notes.append('the shared relative-position table was copied into every block')
    if img_size is None or src is None:
        return
    p = kwargs['patch_size']
    hw = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    if hw[0] % p or hw[1] % p:
        raise ValueError(f'img_size={img_size} is not divisible by the patch size {p}')
    dst = (hw[0] // p, hw[1] // p)
    if dst == src:
        return
    fit_position_tables(sd, dst)
    notes.append(f'position tables resized from a {src[0]}x{src[1]} to a {dst[0]}x{dst[1]} grid')
