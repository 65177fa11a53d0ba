#!/usr/bin/env python
"""Convert a ViT checkpoint into PeCoViT weights.

    python tools/convert_checkpoint.py SRC DST [--format F] [--img-size N] [--per-block-rel-pos]
                                       [--num-heads H] [--unsafe-pickle]

Reads unilm BEiT / PeCo release files, timm ViT and BEiT (.pth or .safetensors), MAE, MoCo v3,
DINO, mmpretrain and peco_mm checkpoints (the format is detected unless --format is given),
writes `{'state_dict': ..., 'meta': {...}}` to DST, and prints the PeCoViT arguments that load
it, e.g. in a config:

    backbone=dict(type='PeCoViT', <printed arguments>,
                  init_cfg=dict(type='Pretrained', checkpoint='DST'))

Every dropped, unrecognised, missing or unexpected key is printed by name. The source is read
with torch.load(weights_only=True); files holding other pickled objects (e.g. argparse
namespaces in MAE / DINO training checkpoints) need --unsafe-pickle, for trusted files only.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from peco_mm.models.convert import (FORMATS, convert_checkpoint,  # noqa: E402
                                    load_checkpoint_file)
from peco_mm.models.vit import PeCoViT  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('src', help='source checkpoint (.pth / .pt / .safetensors)')
    parser.add_argument('dst', help='where to write the PeCoViT checkpoint')
    parser.add_argument('--format', choices=FORMATS, default=None,
                        help='source layout (default: detected)')
    parser.add_argument('--img-size', type=int, default=None,
                        help='resize position tables to this image size')
    parser.add_argument('--per-block-rel-pos', action='store_true',
                        help='copy a shared relative-position table into every block')
    parser.add_argument('--num-heads', type=int, default=None,
                        help='attention heads, when the weights do not say (no relative-'
                        'position table); default embed_dims // 64')
    parser.add_argument('--unsafe-pickle', action='store_true',
                        help='allow torch.load(weights_only=False) for a trusted source that '
                        'holds non-tensor objects')
    return parser.parse_args(argv)


def config_repr(value) -> str:
    """Python source for a value, dicts written as dict(k=v) the way configs spell them."""
    if isinstance(value, dict):
        return 'dict(' + ', '.join(f'{k}={config_repr(v)}' for k, v in value.items()) + ')'
    return repr(value)


def print_keys(title: str, keys, reasons: dict | None = None) -> None:
    keys = list(keys)
    print(f'{title}: {len(keys)}')
    for k in keys:
        print(f'  {k}' + (f'  ({reasons[k]})' if reasons and k in reasons else ''))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        ckpt = load_checkpoint_file(args.src, unsafe_pickle=args.unsafe_pickle, warn=print)
        conv = convert_checkpoint(ckpt, args.format, args.img_size, args.per_block_rel_pos)
    except (FileNotFoundError, ValueError) as err:
        print(f'convert_checkpoint: error: {err}', file=sys.stderr)
        return 1
    kwargs = conv.kwargs
    if args.num_heads is not None:
        kwargs['arch']['num_heads'] = args.num_heads
        conv.notes = [n for n in conv.notes if not n.startswith('num_heads=')]
    print(f'source: {args.src} ({conv.fmt}, backbone at {conv.source})')
    for note in conv.notes:
        print(f'note: {note}')
    print_keys('dropped keys (not part of the backbone)', sorted(conv.dropped), conv.dropped)
    print_keys('unrecognised keys (not converted)', conv.unrecognised)

    # check the result against the PeCoViT the printed arguments build
    model = PeCoViT(**kwargs)
    missing, unexpected = model.load_state_dict(dict(conv.state_dict), strict=False)
    print_keys('missing keys (PeCoViT parameters the file does not provide)', missing)
    print_keys('unexpected keys (in the file, not in PeCoViT)', unexpected)

    out_dir = os.path.dirname(os.path.abspath(args.dst))
    os.makedirs(out_dir, exist_ok=True)
    meta = dict(source=os.path.abspath(args.src), format=conv.fmt, pecovit_args=kwargs,
                dropped=sorted(conv.dropped), unrecognised=conv.unrecognised, notes=conv.notes)
    torch.save({'state_dict': conv.state_dict, 'meta': meta}, args.dst)
    n_params = sum(v.numel() for v in conv.state_dict.values())
    print(f'wrote {args.dst}: {len(conv.state_dict)} tensors, {n_params / 1e6:.2f} M values')
    args_str = config_repr(kwargs)[len('dict('):-1]
    print(f'PeCoViT arguments: {args_str}')
    print(f"config: backbone=dict(type='PeCoViT', {args_str}, "
          f"init_cfg=dict(type='Pretrained', checkpoint={args.dst!r}))")
    return 0 if not (missing or unexpected or conv.unrecognised) else 2


if __name__ == '__main__':
    sys.exit(main())
