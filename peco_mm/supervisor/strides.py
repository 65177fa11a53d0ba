"""Pre-flight check of feature strides: the backbone's against what the neck and heads assume.

A PeCoViT's feature maps lie at its `patch_size`, and its pyramid adapter (`pyramid=dict(...)`
in the backbone, or `ViTPyramidAdapter` as a neck) resizes them by `scales` (4, 2, 1, 0.5 by
default: strides 4/8/16/32 at patch 16, but 2/4/8/16 at patch 8); an FPN keeps the strides of
the levels it takes and doubles them for each extra level. mmdet's heads state the strides
they assume: the anchor (or point) generator's `strides`, the RoI extractors'
`featmap_strides`; mmseg's FPN head its `feature_strides`, and every decode head picks maps by
`in_index`. None of them compares: anchors laid at stride 4 on a stride-2 map cover a quarter
of the image, and training runs without a word. `problems(cfg, make)` compares before
anything is built and names the key to change, with the value that fits.

Only what the config states is compared: a backbone other than PeCoViT, or a neck this module
does not know, ends the check for that model. Standard library only (run by the launcher
before torch).
"""
from __future__ import annotations

from numbers import Real

PYRAMID_SCALES = (4, 2, 1, 0.5)  # ViTPyramidAdapter's default
LAYOUTS = (PYRAMID_SCALES, (2, 1, 0.5, 0.25))  # ViTPyramidAdapter.LAYOUTS, without torch
FPN_TYPES = ('FPN', )  # mmdet's and mmseg's: levels start_level..end_level, then extra ones


def _type(node) -> str:
    return str(node.get('type', '')).rsplit('.', 1)[-1] if isinstance(node, dict) else ''


def _number(value) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _show(strides) -> str:
    return '[' + ', '.join(_number(s) for s in strides) + ']'


def backbone_maps(model: dict) -> tuple[list[float], str] | None:
    """(strides of the backbone's feature maps, how they come about) of a PeCoViT, or None."""
    backbone = model.get('backbone')
    if _type(backbone) != 'PeCoViT':
        return None
    patch = backbone.get('patch_size', 16)
    if not isinstance(patch, int) or patch <= 0:
        return None  # PeCoViT refuses it with its own message
    pyramid = backbone.get('pyramid')
    if isinstance(pyramid, dict):
        scales = tuple(pyramid.get('scales', PYRAMID_SCALES))
        return ([patch / s for s in scales], f'model.backbone.patch_size={patch} with '
                f'model.backbone.pyramid scales {tuple(scales)}')
    out = backbone.get('out_indices')
    n = len(out) if isinstance(out, (list, tuple)) else 1
    return [float(patch)] * n, f'model.backbone.patch_size={patch}'


def neck_maps(neck, maps: list[float], how: str) -> tuple[list[float], str] | None:
    """The strides after `neck` (a dict, a list of them, or None), or None for a neck this
    check does not know."""
    for i, node in enumerate(neck if isinstance(neck, (list, tuple)) else [neck]):
        key = f'model.neck[{i}]' if isinstance(neck, (list, tuple)) else 'model.neck'
        kind = _type(node)
        if node is None:
            continue
        if kind == 'ViTPyramidAdapter':
            scales = tuple(node.get('scales', PYRAMID_SCALES))
            maps = [s / r for s, r in zip(maps, scales)]
            how += f', {key} ViTPyramidAdapter scales {scales}'
        elif kind in FPN_TYPES:
            end = node.get('end_level', -1)
            used = maps[node.get('start_level', 0):None if end == -1 else end + 1]
            extra = max(0, int(node.get('num_outs', len(used))) - len(used))
            maps = used + [used[-1] * 2 ** (k + 1) for k in range(extra)] if used else used
            how += f', {key} FPN' + (f' (+{extra} level{"s" * (extra > 1)} at 2x)'
                                     if extra else '')
        else:
            return None
    return maps, how


def _heads(model: dict) -> list[tuple[str, object]]:
    """(config key, stated strides) of every part of the model that states them."""
    out = []
    for head in ('rpn_head', 'bbox_head'):
        node = model.get(head)
        if isinstance(node, dict):
            for gen in ('anchor_generator', 'prior_generator'):
                if isinstance(node.get(gen), dict) and 'strides' in node[gen]:
                    out.append((f'model.{head}.{gen}.strides', node[gen]['strides']))
            if 'strides' in node:  # FCOS-style heads
                out.append((f'model.{head}.strides', node['strides']))
    roi = model.get('roi_head') if isinstance(model.get('roi_head'), dict) else {}
    for part in ('bbox_roi_extractor', 'mask_roi_extractor'):
        node = roi.get(part)
        for i, ext in enumerate(node if isinstance(node, (list, tuple)) else [node]):
            if isinstance(ext, dict) and 'featmap_strides' in ext:
                key = f'model.roi_head.{part}' + (f'[{i}]' if isinstance(node, list) else '')
                out.append((f'{key}.featmap_strides', ext['featmap_strides']))
    return out


def _stride(value) -> float | None:
    """A stated stride: a number, or (w, h) / (h, w) of equal numbers."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    return float(value) if isinstance(value, Real) and not isinstance(value, bool) else None


def decode_head_problems(model: dict, maps: list[float], how: str, make) -> list:
    """mmseg's decode / auxiliary heads: `in_index` within the maps, `feature_strides` (FPN
    head) those of the maps it picks."""
    out = []
    for head in ('decode_head', 'auxiliary_head'):
        node = model.get(head)
        for i, h in enumerate(node if isinstance(node, (list, tuple)) else [node]):
            if not isinstance(h, dict):
                continue
            key = f'model.{head}' + (f'[{i}]' if isinstance(node, (list, tuple)) else '')
            index = h.get('in_index', -1)
            index = list(index) if isinstance(index, (list, tuple)) else [index]
            if not all(isinstance(j, int) and -len(maps) <= j < len(maps) for j in index):
                out.append(make(f'{key}.in_index', f'{key}.in_index={h.get("in_index")} but '
                                f'the backbone gives {len(maps)} feature maps ({how})',
                                [f'Fix: --cfg-options {key}.in_index=<indices below '
                                 f'{len(maps)}>'], f'strides:{key}'))
                continue
            stated = h.get('feature_strides')
            picked = [maps[j] for j in index]
            if stated is not None and [_stride(s) for s in stated] != picked:
                out.append(_mismatch(make, f'{key}.feature_strides', stated, picked, how,
                                     model))
    return out


def _mismatch(make, key: str, stated, actual: list[float], how: str, model: dict):
    return make(key, f'{key}={list(stated)} but the feature maps it gets are at strides '
                f'{_show(actual)} ({how})',
                [f'Fix: --cfg-options {key}="{_show(actual)}", or '
                 + _backbone_fix(model, [_stride(s) for s in stated])], f'strides:{key}')


def _backbone_fix(model: dict, stated: list) -> str:
    """The pyramid scales that give the stated strides at the backbone's patch size, where
    ViTPyramidAdapter has such a layout; else the keys that set the strides."""
    backbone = model['backbone']
    patch = backbone.get('patch_size', 16)
    scales = tuple(patch / s if s else 0 for s in stated[:4])
    if isinstance(backbone.get('pyramid'), dict) and scales in LAYOUTS:
        return (f'model.backbone.pyramid.scales="({", ".join(_number(s) for s in scales)})" '
                f'(ViTPyramidAdapter: strides {_show(stated[:4])} at patch {patch})')
    return 'a model.backbone.patch_size / pyramid scales that give the stated strides'


def problems(cfg, make) -> list:
    """One problem per neck or head whose stated strides (or map indices) are not those of
    the feature maps it gets; `make(key, message, details, path)` builds a problem."""
    model = cfg.get('model')
    if not isinstance(model, dict):
        return []
    found = backbone_maps(model)
    found = found and neck_maps(model.get('neck'), *found)
    if not found:
        return []
    maps, how = found
    out = []
    for key, stated in _heads(model):
        if not isinstance(stated, (list, tuple)):
            continue
        actual = maps[:len(stated)] if 'featmap_strides' in key else maps
        if [_stride(s) for s in stated] != actual:
            out.append(_mismatch(make, key, stated, actual, how, model))
    return out + decode_head_problems(model, maps, how, make)
