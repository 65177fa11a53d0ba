"""Layer-wise learning-rate decay (BEiT, MAE `util/lr_decay.py`) for any task.

A protocol plus a pure function: the backbone says each parameter's depth through
`get_layer_depth(name, prefix) -> (depth, num_depths)`; `layer_decay_param_groups` builds the
groups with lr scale `rate ** (num_depths - 1 - depth)`. The constructor never looks at class
names, so the same config key drives classification, UperNet and Mask R-CNN alike.

Why not mmpretrain's `LearningRateDecayOptimWrapperConstructor`: it computes the same lr
scales from the same `get_layer_depth` (tests/engine/test_layer_decay.py compares them
parameter by parameter), but it asks the top-level model for `get_layer_depth`, which
mmpretrain's classifiers have and mmseg's EncoderDecoder, mmdet's detectors and mmaction2's
recognizers do not; and it lives in mmpretrain's registry only. This one finds the backbone
that answers, in any host, and takes BEiT's weight-decay exemptions from the backbone's
`no_weight_decay()` instead of per-config custom keys.
"""
from __future__ import annotations

from collections import OrderedDict

import torch.nn as nn
from mmengine.logging import print_log
from mmengine.optim import DefaultOptimWrapperConstructor

from ...registry import OPTIM_WRAPPER_CONSTRUCTORS


def find_depth_provider(model: nn.Module) -> tuple[nn.Module, str]:
    """The module that says parameter depths, and the prefix of its parameter names."""
    model = getattr(model, 'module', model)  # DDP / FSDP wrappers
    backbone = getattr(model, 'backbone', None)
    if backbone is not None and hasattr(backbone, 'get_layer_depth'):
        return backbone, 'backbone.'
    if hasattr(model, 'get_layer_depth'):
        return model, ''
    raise TypeError(
        'LayerDecayOptimWrapperConstructor needs a model whose `backbone` (or the model '
        'itself) has get_layer_depth(param_name, prefix) -> (depth, num_depths), as PeCoViT '
        f'does; got {type(model).__name__} with backbone {type(backbone).__name__}')


def layer_decay_param_groups(model: nn.Module, base_lr: float, weight_decay: float,
                             layer_decay_rate: float,
                             custom_keys: dict[str, dict] | None = None
                             ) -> list[dict]:
    """Param groups keyed by (depth, decay / no_decay, custom key).

    Weight decay is 0 for 1-d parameters (norms, biases) and for the names the backbone
    lists in `no_weight_decay()`; `custom_keys` = {substring: dict(lr_mult=, decay_mult=)}
    multiply on top (first matching key, longest first, as mmengine does).
    """
    provider, prefix = find_depth_provider(model)
    model = getattr(model, 'module', model)
    no_wd = {prefix + n for n in getattr(provider, 'no_weight_decay', lambda: set())()}
    custom_keys = custom_keys or {}
    keys = sorted(custom_keys, key=len, reverse=True)
    groups: OrderedDict[str, dict] = OrderedDict()
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        depth, num_depths = provider.get_layer_depth(name, prefix)
        if not 0 <= depth < num_depths:
            raise ValueError(f'get_layer_depth({name!r}) returned {depth}, outside '
                             f'0..{num_depths - 1}')
        decay = not (param.ndim <= 1 or name in no_wd)
        scale = layer_decay_rate ** (num_depths - 1 - depth)
        lr_mult, decay_mult, key = 1.0, 1.0, ''
        for k in keys:
            if k in name:
                lr_mult = custom_keys[k].get('lr_mult', 1.0)
                decay_mult = custom_keys[k].get('decay_mult', 1.0)
                key = k
                break
        gname = f'depth_{depth}_{"decay" if decay else "no_decay"}{"_" + key if key else ""}'
        if gname not in groups:
            groups[gname] = dict(
                params=[], param_names=[], depth=depth, lr_scale=scale * lr_mult,
                lr=base_lr * scale * lr_mult,
                weight_decay=weight_decay * decay_mult if decay else 0.0)
        groups[gname]['params'].append(param)
        groups[gname]['param_names'].append(name)
    return list(groups.values())


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class LayerDecayOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """`paramwise_cfg=dict(layer_decay_rate=0.65, custom_keys={...})`.

    The number of layers comes from the backbone (`get_layer_depth`), never from the config.
    The groups are logged once, when the optimizer is built.
    """

    def __init__(self, optim_wrapper_cfg: dict, paramwise_cfg: dict | None = None) -> None:
        paramwise_cfg = dict(paramwise_cfg or {})
        self.layer_decay_rate = float(paramwise_cfg.pop('layer_decay_rate', 1.0))
        self.custom_keys = paramwise_cfg.pop('custom_keys', {})
        if paramwise_cfg:
            raise KeyError(f'LayerDecayOptimWrapperConstructor: unknown paramwise_cfg keys '
                           f'{sorted(paramwise_cfg)}; allowed: layer_decay_rate, custom_keys')
        if not 0 < self.layer_decay_rate <= 1:
            raise ValueError(f'layer_decay_rate={self.layer_decay_rate}; allowed: (0, 1]')
        super().__init__(optim_wrapper_cfg, None)
        # non-empty so that DefaultOptimWrapperConstructor.__call__ routes through add_params
        self.paramwise_cfg = dict(layer_decay_rate=self.layer_decay_rate)

    def add_params(self, params: list[dict], module: nn.Module, **kwargs) -> None:
        groups = layer_decay_param_groups(module, self.base_lr, self.base_wd or 0.0,
                                          self.layer_decay_rate, self.custom_keys)
        lines = [f'layer decay {self.layer_decay_rate}: {len(groups)} parameter groups',
                 f'{"group":<32}{"depth":>6}{"lr_scale":>10}{"wd":>8}{"params":>8}']
        for g in groups:
            names = g.pop('param_names')
            lines.append(f'{"":<0}{names[0][:30] + ("…" if len(names) > 1 else ""):<32}'
                         f'{g["depth"]:>6}{g["lr_scale"]:>10.4f}{g["weight_decay"]:>8.3g}'
                         f'{len(g["params"]):>8}')
            g.pop('depth')
            params.append(g)
        print_log('\n'.join(lines), logger='current')


class BaseGroupLrFirst:
    """Mixin for an optimizer wrapper: `get_lr()['lr']` starts with the lr of the first
    parameter group at the base lr (`lr_scale` 1 in layer decay's groups: the head's), the
    other groups following in their order. mmengine's RuntimeInfoHook logs `lr[0]` as the
    run's `lr`: the config's lr as scheduled, not the lowest layer's (0.65^13 of it for
    ViT-B). Groups without `lr_scale` keep their order."""

    def get_lr(self) -> dict[str, list[float]]:
        res = super().get_lr()
        lrs = res.get('lr') or []
        scales = [g.get('lr_scale', 1.0) for g in self.optimizer.param_groups]
        base = next((i for i, s in enumerate(scales) if s == 1.0), 0)
        if 0 < base < len(lrs):
            res['lr'] = [lrs[base]] + lrs[:base] + lrs[base + 1:]
        return res
