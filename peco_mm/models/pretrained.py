"""Loading pretrained weights into a PeCoViT (or a model built on it) from any supported file:
what `init_cfg=dict(type='Pretrained', checkpoint=...)` does."""
from __future__ import annotations

import torch.nn as nn

from ..checkpoint import convert_state_dict, detect_format, is_url, read_checkpoint, select_prefix


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
    if fresh:
        parts = [p.rstrip('.') for p in model.FRESH_PREFIXES if any(k.startswith(p) for k in fresh)]
        print_log(f'{path}: not in the checkpoint, as expected: {", ".join(parts)} '
                  f'({len(fresh)} tensors) start fresh, from their initialisation'
                  f'{getattr(model, "FRESH_NOTE", "")}', logger='current')
    if missing:
        print_log(f'{path}: missing keys {missing}', logger='current', level=30)
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
