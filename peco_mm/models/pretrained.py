"""Loading pretrained weights into a PeCoViT (or a model built on it) from any supported file:
what `init_cfg=dict(type='Pretrained', checkpoint=...)` does."""
from __future__ import annotations

import re

import torch.nn as nn

from ..checkpoint import convert_state_dict, detect_format, is_url, read_checkpoint, select_prefix


# weights a fine-tuning backbone adds to what pretraining trains, expected to be missing from a
# checkpoint that holds none of them: (prefix, what they are)
ADDED_BY_FINETUNING = (
    ('fc_norm.', "the norm after global average pooling (out_type='avg_featmap'), which "
                 'fine-tuning adds and pretraining has none of; it starts from its '
                 'initialisation, as in BEiT and MAE fine-tuning'),
)


def load_pretrained(model: nn.Module, path: str, prefix: str | None = None,
                    map_location: str = 'cpu') -> tuple[list[str], list[str]]:
    """Load a checkpoint into `model` for `init_cfg=dict(type='Pretrained', ...)`.

    Accepts a PeCo pretraining / fine-tuning checkpoint (keys under `prefix`, e.g.
    'backbone.'), a file written by tools/convert_checkpoint.py (plain PeCoViT keys), or a
    published unilm / timm / MAE / MoCo v3 / DINO / mmpretrain file, converted on the fly. So
    one config key, the checkpoint path, selects the pretrained weights. Missing and unexpected
    keys are logged by name; a checkpoint that shares no key with the model is an error.
    """
    import os.path as osp

    from mmengine.logging import print_log

    if not path or not (is_url(path) or osp.isfile(str(path))):
        raise FileNotFoundError(f'pretrained checkpoint {path!r} not found (set '
                                'model.backbone.init_cfg.checkpoint, or init_cfg=None to train '
                                'from scratch)')
    ckpt = read_checkpoint(path)
    inner = ckpt.get('state_dict', ckpt) if isinstance(ckpt, dict) else ckpt
    if prefix and any(k.startswith(prefix) for k in inner):
        ckpt = select_prefix(inner, prefix)
    # always through the converter: our names pass unchanged; timm / unilm / MAE / MoCo v3 /
    # DINO / mmpretrain names are mapped (layer scales, per-block tables, dropped heads)
    fmt = detect_format(ckpt)
    state, _ = convert_state_dict(ckpt, fmt)
    if fmt != 'peco_mm':
        print_log(f'{path}: converted from the {fmt!r} format', logger='current')
    own = set(model.state_dict())
    # load_state_dict fits the tables through PeCoViT.checkpoint_filter
    missing, unexpected = model.load_state_dict(dict(state), strict=False)
    # parts a backbone initialises itself (a pyramid, a video model's temporal attention)
    fresh = [k for k in missing if k.startswith(model.FRESH_PREFIXES)]
    missing = [k for k in missing if not k.startswith(model.FRESH_PREFIXES)]
    if len(missing) == len(own) or not (own & set(state)):
        raise ValueError(f'{path}: no key matches PeCoViT; found e.g. {list(state)[:5]}')
    mismatch = architecture_mismatch(path, model, state, missing, unexpected)
    if mismatch:
        raise ValueError(mismatch)
    if fresh:
        parts = [p.rstrip('.') for p in model.FRESH_PREFIXES if any(k.startswith(p) for k in fresh)]
        print_log(f'{path}: not in the checkpoint, as expected: {", ".join(parts)} '
                  f'({len(fresh)} tensors) start fresh, from their initialisation'
                  f'{getattr(model, "FRESH_NOTE", "")}', logger='current')
    unexplained = report_expected_gaps(path, missing, {*inner, *ckpt, *state})
    if unexplained:
        print_log(f'{path}: missing keys {unexplained}', logger='current', level=30)
    # the pretraining model's [MASK] token and final norm: fine-tuning configs without masking
    # or with final_norm=False drop them, as BEiT and MAE fine-tuning do
    dropped = [k for k in unexpected if k == 'mask_token' or k.startswith('norm.')]
    if dropped:
        print_log(f'{path}: not loaded, as expected: {dropped} (the pretraining [MASK] token '
                  'and final norm, which this backbone does not have)', logger='current')
    others = [k for k in unexpected if k not in dropped]
    if others:
        print_log(f'{path}: unexpected keys {others}', logger='current', level=30)
    return missing, unexpected


def report_expected_gaps(path: str, missing: list[str], names: set[str]) -> list[str]:
    """Log at INFO, with the reason, the missing keys that fine-tuning adds (`fc_norm.*` when
    the checkpoint's key `names`, before and after conversion, hold no `fc_norm` at all, e.g.
    a pretraining checkpoint's); return the others, which stay warnings. A checkpoint that
    holds part of such a module, or one the conversion dropped, is not an expected gap."""
    from mmengine.logging import print_log
    rest = list(missing)
    for prefix, why in ADDED_BY_FINETUNING:
        gap = [k for k in rest if k.startswith(prefix)]
        if gap and not any(str(k).startswith(prefix) for k in names):
            print_log(f'{path}: not in the checkpoint, as expected: {prefix.rstrip(".")} '
                      f'({len(gap)} tensors), {why}', logger='current')
            rest = [k for k in rest if k not in gap]
    return rest


# weights that only another ViT flavour has or lacks: (key pattern, what they are, the PeCoViT
# argument that decides them); the last: whole blocks that one side lacks (another depth)
FLAVOUR_PARTS = (
    (r'\.gamma_[12]$', 'layer scale', 'layer_scale_init_value'),
    (r'relative_position_bias_table$|relative_position_index$', 'relative position bias',
     'rel_pos_bias'),
    (r'^pos_embed$', 'absolute position embedding', 'use_abs_pos_emb'),
    (r'\.attn\.(q_bias|v_bias|qkv\.bias)$', 'attention biases', 'qkv_bias'),
    (r'^blocks\.\d+\.', 'transformer blocks', 'arch'),
)


def architecture_mismatch(path: str, model: nn.Module, state: dict, missing: list[str],
                          unexpected: list[str]) -> str | None:
    """Why a checkpoint of another ViT flavour (a timm or MAE ViT into a PeCo config: no layer
    scale, absolute positions, ...) would load only partly, and the arguments that fit it; None
    when the weights that differ are none of these. Partly loaded, training would go on with
    the rest at its initial values."""
    parts: dict[str, list[str]] = {}
    depth = {side: {m.group(1) for k in keys if (m := re.match(r'blocks\.(\d+)\.', k))}
             for side, keys in (('file', state), ('model', model.state_dict()))}
    for how, keys, other in (('not in the file', missing, 'file'),
                             ('in the file only', unexpected, 'model')):
        for key in keys:
            block = re.match(r'blocks\.(\d+)\.', key)
            whole = block and block.group(1) not in depth[other]  # a block the other lacks
            part = FLAVOUR_PARTS[-1] if whole else next(
                (p for p in FLAVOUR_PARTS[:-1] if re.search(p[0], key)), None)
            if part:
                parts.setdefault(f'{part[1]} ({how})', []).append(key)
    if not parts:
        return None
    found = '; '.join(f'{what}: {len(keys)}, e.g. {keys[0]}' for what, keys in parts.items())
    advice = ''
    try:
        from ..checkpoint.vit_args import infer_pecovit_kwargs
        own, theirs = (infer_pecovit_kwargs(dict(sd))[0] for sd in (model.state_dict(), state))
    except (ValueError, KeyError, IndexError):
        own = theirs = {}
    if theirs:
        for kw in (own, theirs):  # what the weights decide: layer scale or none, the depth
            kw['layer_scale_init_value'] = kw['layer_scale_init_value'] and 0.1
            kw['arch'] = kw['arch']['num_layers']
        changes = [f"{'arch.num_layers' if arg == 'arch' else arg}={theirs[arg]!r}"
                   for _, _, arg in FLAVOUR_PARTS if theirs[arg] != own[arg]]
        if changes:
            advice = f" Set the backbone's {', '.join(changes)} to fit it;"
    return (f'{path}: a ViT of another flavour than this backbone: {found}. Loading it would '
            'leave these weights at their initial values.' + advice + ' tools/convert_checkpoint'
            f'.py {path} OUT.pth prints the arguments that load it, or use a checkpoint of this '
            "backbone's architecture.")
