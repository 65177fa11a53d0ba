"""ViTPyramidAdapter: mmseg's `Feature2Pyramid` under the name PeCo's configs and checkpoints use.

PeCo (appendix, following BEiT): four ViT maps at stride 16 become strides 4, 8, 16, 32 through
4x up (transposed conv, norm, GELU, transposed conv), 2x up (one transposed conv), identity and
2x max-pool. That is mmseg's `Feature2Pyramid` step for step, so the computation is mmseg's;
this subclass adds the arguments PeCo's configs pass (`in_channels` as a neck receives it,
`init_cfg`), argument checks with clear errors, and the loading of files written before the
switch, whose keys were `branches.<i>.*`. A host module: importing it imports mmseg.
"""
from __future__ import annotations

import copy
from typing import Sequence

import torch
from mmengine.model import BaseModule
from mmseg.models.necks import Feature2Pyramid

from ..registry import MODELS

# the two layouts Feature2Pyramid's forward knows (it applies its branches in this order)
LAYOUTS = ((4, 2, 1, 0.5), (2, 1, 0.5, 0.25))
NORMS = ('BN', 'SyncBN', 'GN')
# old name -> Feature2Pyramid's, for files saved when the adapter kept its branches in a list
# (scales 4, 2, 1, 0.5: branch 0 was the 4x stack, branch 1 the 2x conv; 2 and 3 hold nothing)
LEGACY_PREFIXES = (('branches.0.', 'upsample_4x.'), ('branches.1.', 'upsample_2x.0.'))


@MODELS.register_module(force=True)  # replaces the stand-in registered by `import peco_mm`
class ViTPyramidAdapter(Feature2Pyramid, BaseModule):
    """Turn four (B, C, h, w) maps into a (stride 4, 8, 16, 32) pyramid with C channels each.

    Args:
        in_channels: ViT width C (an int, or four equal ints as mmdet/mmseg necks receive).
        scales: resize factor per input: (4, 2, 1, 0.5) or (2, 1, 0.5, 0.25).
        norm_cfg: dict(type='BN' | 'SyncBN' | 'GN', ...) used inside the 4x branch; GN takes
            `num_groups` (32 when not given).
        init_cfg: mmengine's init_cfg (e.g. Pretrained weights for the adapter alone).
    """

    def __init__(self, in_channels: int | Sequence[int] = 768,
                 scales: Sequence[float] = (4, 2, 1, 0.5),
                 norm_cfg: dict | None = None, init_cfg: dict | None = None) -> None:
        if not isinstance(in_channels, int):
            if len(set(in_channels)) != 1:
                raise ValueError(f'in_channels={list(in_channels)}: a ViT gives equal widths')
            in_channels = int(in_channels[0])
        if tuple(scales) not in LAYOUTS:
            raise ValueError(f'scales={tuple(scales)}; allowed: {LAYOUTS[0]} or {LAYOUTS[1]}')
        norm_cfg = dict(norm_cfg or dict(type='BN'))
        if norm_cfg.get('type', 'BN') not in NORMS:
            raise ValueError(f"norm_cfg type={norm_cfg.get('type')!r}; allowed: {NORMS}")
        norm_cfg.setdefault('type', 'BN')
        if norm_cfg['type'] == 'GN':
            norm_cfg.setdefault('num_groups', 32)
        super().__init__(embed_dim=in_channels, rescales=list(scales), norm_cfg=norm_cfg)
        self.init_cfg = copy.deepcopy(init_cfg)  # Feature2Pyramid gives BaseModule none
        self.in_channels = in_channels
        self.scales = tuple(scales)
        self.register_load_state_dict_pre_hook(ViTPyramidAdapter.rename_legacy_keys)

    def forward(self, feats: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        if len(feats) != len(self.scales):
            raise ValueError(f'ViTPyramidAdapter got {len(feats)} maps, expected '
                             f'{len(self.scales)}')
        return super().forward(feats)  # (B, C, h*s, w*s) each

    @staticmethod
    def rename_legacy_keys(module, state_dict: dict, prefix: str, *args) -> None:
        """A load_state_dict pre-hook: `branches.<i>.*` keys of older files take
        Feature2Pyramid's names, in place, before the weights are matched."""
        for key in [k for k in state_dict if k.startswith(prefix + 'branches.')]:
            rest = key[len(prefix):]
            for old, new in LEGACY_PREFIXES:
                if rest.startswith(old):
                    state_dict[prefix + new + rest[len(old):]] = state_dict.pop(key)
                    break
