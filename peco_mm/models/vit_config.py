"""PeCoViT's arguments: the architecture presets and how an `arch` resolves, the allowed
choices, the default output blocks, and the stock `pretrained` key of mmseg / mmdet configs."""
from __future__ import annotations

import difflib
from typing import Sequence

from ..layers.attention import QKV_BIAS_CHOICES

ARCH_ZOO: dict[str, dict] = {
    'tiny': dict(embed_dims=192, num_layers=12, num_heads=3, mlp_ratio=4.0),
    'small': dict(embed_dims=384, num_layers=12, num_heads=6, mlp_ratio=4.0),
    'base': dict(embed_dims=768, num_layers=12, num_heads=12, mlp_ratio=4.0),
    'large': dict(embed_dims=1024, num_layers=24, num_heads=16, mlp_ratio=4.0),
    'huge': dict(embed_dims=1280, num_layers=32, num_heads=16, mlp_ratio=4.0),
    # tiny, for tests and smoke runs (as timm's test_vit)
    'test': dict(embed_dims=64, num_layers=2, num_heads=4, mlp_ratio=4.0),
}
OUT_TYPES = ('cls_token', 'avg_featmap', 'featmap')
ARCH_KEYS = ('embed_dims', 'num_layers', 'num_heads', 'mlp_ratio')  # of an `arch` dict


def pretrained_init_cfg(pretrained: str | None, init_cfg: dict | list | None
                        ) -> dict | list | None:
    """mmseg / mmdet hosts pass a stock config's `model.pretrained` to their backbone: the
    init_cfg it stands for (one of the two may be set)."""
    if pretrained is None:
        return init_cfg
    if not isinstance(pretrained, str):
        raise TypeError(f'pretrained must be a checkpoint path (str) or None, got '
                        f'{type(pretrained).__name__}')
    if init_cfg is not None:
        raise ValueError(f'pretrained={pretrained!r} and init_cfg={init_cfg!r} are both '
                         'set; give the checkpoint in one of them')
    return dict(type='Pretrained', checkpoint=pretrained)


def resolve_arch(arch: str | dict, **overrides) -> dict:
    """The architecture dict of `arch` (an `ARCH_ZOO` name or a dict with embed_dims,
    num_layers, num_heads), with the flat arguments that are not None on top."""
    if isinstance(arch, str):
        if arch not in ARCH_ZOO:
            raise ValueError(f'arch={arch!r}; allowed: {sorted(ARCH_ZOO)} or a dict with '
                             'embed_dims, num_layers, num_heads')
        arch = ARCH_ZOO[arch]
    else:
        unknown = sorted(set(arch) - set(ARCH_KEYS), key=str)
        if unknown:
            near = difflib.get_close_matches(str(unknown[0]), ARCH_KEYS, n=1)
            raise ValueError(f'arch dict has unknown keys {unknown}'
                             + (f' (did you mean {near[0]!r}?)' if near else '')
                             + f'; allowed: {list(ARCH_KEYS)}')
        missing = {'embed_dims', 'num_layers', 'num_heads'} - set(arch)
        if missing:
            raise ValueError(f'arch dict is missing {sorted(missing)}')
    return {**arch, **{k: v for k, v in overrides.items() if v is not None}}


def check_choices(qkv_bias: str, rel_pos_bias: str, out_type: str, patch_size: int,
                  img_size: tuple[int, int]) -> None:
    """Refuse a value outside its allowed set, naming the set."""
    if qkv_bias not in QKV_BIAS_CHOICES:
        raise ValueError(f'qkv_bias={qkv_bias!r}; allowed: {QKV_BIAS_CHOICES} or a bool')
    if rel_pos_bias not in ('none', 'shared', 'per_block'):
        raise ValueError(f"rel_pos_bias={rel_pos_bias!r}; allowed: 'none', 'shared', "
                         "'per_block'")
    if out_type not in OUT_TYPES:
        raise ValueError(f'out_type={out_type!r}; allowed: {OUT_TYPES}')
    if patch_size <= 0:
        raise ValueError(f'patch_size={patch_size} must be positive')
    if img_size[0] % patch_size or img_size[1] % patch_size:
        raise ValueError(f'img_size={img_size} is not divisible by patch_size={patch_size}')


def default_pyramid_indices(num_layers: int) -> tuple[int, int, int, int]:
    """Blocks feeding the four scales: 4/6/8/12 of 12 (1-based), scaled for ViT-L/H."""
    return tuple(round(num_layers * f) - 1 for f in (4 / 12, 6 / 12, 8 / 12, 1.0))


def resolve_out_indices(out_indices: int | Sequence[int] | None, num_layers: int,
                        pyramid: dict | None, out_type: str) -> list[int]:
    """Sorted non-negative block indices; by default the last block, or blocks 4/6/8/12
    (scaled by depth) for a pyramid, which needs out_type='featmap' and four of them."""
    if out_indices is None:
        out_indices = -1 if pyramid is None else default_pyramid_indices(num_layers)
    out_indices = [out_indices] if isinstance(out_indices, int) else list(out_indices)
    for i in out_indices:
        if not -num_layers <= i < num_layers:
            raise ValueError(f'out_indices entry {i} is out of range for {num_layers} blocks')
    out = sorted(i % num_layers for i in out_indices)
    if pyramid is not None and (out_type != 'featmap' or len(out) != 4):
        raise ValueError("pyramid needs out_type='featmap' and four out_indices, got "
                         f'out_type={out_type!r}, out_indices={out}')
    return out
