#!/usr/bin/env python
"""Convert a ViT checkpoint into PeCoViT weights.

    python tools/convert_checkpoint.py SRC DST [--format F] [--img-size N] [--per-block-rel-pos]
                                       [--num-heads H]

Reads unilm BEiT / PeCo release files, timm ViT and BEiT (.pth or .safetensors), MAE, MoCo v3,
DINO, mmpretrain and peco_mm checkpoints (the format is detected unless --format is given),
and the folders tools/export_checkpoint.py writes (their model.safetensors, in the format their
config.json names); writes `{'state_dict': ..., 'meta': {...}}` to DST, and prints the PeCoViT
arguments that load it, e.g. in a config:

    backbone=dict(type='PeCoViT', <printed arguments>,
                  init_cfg=dict(type='Pretrained', checkpoint='DST'))

Every dropped, unrecognised, missing or unexpected key is reported: by name when a list is
short, else as a count per group of names (`decoder_blocks.* (24)`); --verbose lists every
key by name. The source is read
with torch.load(weights_only=True); other pickled objects a file holds (e.g. the argparse
namespaces of MAE / DINO training checkpoints) are read as inert stand-ins, whose names are
printed: nothing of them runs (docs/security.md).
"""
# no `from __future__ import annotations`: the dataclass must work when the tool is loaded
# from its file without a sys.modules entry (tests, tools/demo.py)
import argparse
import os
import sys
from dataclasses import dataclass, field
sys.path.append(os.path.dirname(os.path.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


EPILOG = """examples:
  tools/convert_checkpoint.py mocov3_vit-b.pth.tar mocov3_pecovit.pth
  tools/convert_checkpoint.py beit_base_patch16_224_pt22k.pth beit_pecovit.pth \\
      --per-block-rel-pos --img-size 512
  tools/convert_checkpoint.py dino_vitbase16_pretrain_full_checkpoint.pth dino.pth
"""
LIST_LIMIT = 10  # longer key lists are summarised by group unless --verbose


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('src', help='source checkpoint (.pth / .pt / .safetensors), or an '
                        'export folder (its model.safetensors)')
    parser.add_argument('dst', help='where to write the PeCoViT checkpoint')
    parser.add_argument('--format', default=None,
                        help='source layout (default: detected); one of '
                        'peco_mm.checkpoint.FORMATS, which an unknown name lists')
    parser.add_argument('--img-size', type=int, default=None,
                        help='resize position tables to this image size')
    parser.add_argument('--per-block-rel-pos', action='store_true',
                        help='copy a shared relative-position table into every block')
    parser.add_argument('--num-heads', type=int, default=None,
                        help='attention heads, when the weights do not say (no relative-'
                        'position table); default embed_dims // 64')
    parser.add_argument('--verbose', action='store_true',
                        help=f'list every key by name (default: a list of more than '
                        f'{LIST_LIMIT} keys is summarised by name groups)')
    parser.add_argument('--unsafe-pickle', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.unsafe_pickle:  # an earlier version's flag: files are read safely now
        print('convert_checkpoint: --unsafe-pickle is no longer needed or used: other pickled '
              'objects are read as inert stand-ins', file=sys.stderr)
    return args


@dataclass
class ConvertResult:
    """What `convert_file` did: the PeCoViT arguments that load `dst`, and every key report."""
    src: str
    dst: str
    fmt: str
    source: str  # where in the file the backbone was, e.g. "ckpt['model']"
    pecovit_args: dict
    dropped: dict[str, str] = field(default_factory=dict)  # key -> reason
    unrecognised: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # PeCoViT parameters the file lacks
    unexpected: list[str] = field(default_factory=list)  # in the file, not in PeCoViT
    notes: list[str] = field(default_factory=list)
    num_tensors: int = 0
    num_values: int = 0

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.unrecognised)


def convert_file(src: str, dst: str, fmt: str | None = None, img_size: int | None = None,
                 per_block_rel_pos: bool = False, num_heads: int | None = None,
                 warn=None) -> ConvertResult:
    """Convert `src`, check it against the PeCoViT its arguments build, write `dst`.

    Raises FileNotFoundError / ValueError (unreadable file, unknown format, bad size).
    """
    import torch

    from peco_mm.checkpoint import convert_checkpoint, detect_format, read_checkpoint
    from peco_mm.models.vit import PeCoViT

    src, folder_fmt = export_folder_source(src)
    ckpt = read_checkpoint(src, inert_objects=True, warn=warn)
    if fmt is None and folder_fmt and detect_format(ckpt) == 'peco_mm':
        fmt = folder_fmt  # timm's Beit with a shared table has PeCoViT's names exactly
    conv = convert_checkpoint(ckpt, fmt, img_size, per_block_rel_pos)
    kwargs = conv.kwargs
    if num_heads is not None:
        kwargs['arch']['num_heads'] = num_heads
        conv.notes = [n for n in conv.notes if not n.startswith('num_heads=')]
    # check the result against the PeCoViT the arguments build
    model = PeCoViT(**kwargs)
    missing, unexpected = model.load_state_dict(dict(conv.state_dict), strict=False)
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    meta = dict(source=os.path.abspath(src), format=conv.fmt, pecovit_args=kwargs,
                dropped=sorted(conv.dropped), unrecognised=conv.unrecognised, notes=conv.notes)
    torch.save({'state_dict': conv.state_dict, 'meta': meta}, dst)
    return ConvertResult(
        src=str(src), dst=str(dst), fmt=conv.fmt, source=conv.source, pecovit_args=kwargs,
        dropped=conv.dropped, unrecognised=conv.unrecognised, missing=list(missing),
        unexpected=list(unexpected), notes=conv.notes, num_tensors=len(conv.state_dict),
        num_values=sum(v.numel() for v in conv.state_dict.values()))


def export_folder_source(src: str) -> tuple[str, str | None]:
    """An export folder (tools/export_checkpoint.py's, timm's or transformers' hub layout) is
    read through its model.safetensors; returns (the file, the format its config.json names:
    'timm_beit', 'timm_vit', 'hf_beit' or None)."""
    import json
    folder = src if os.path.isdir(src) else None
    if folder is None and os.path.basename(src) == 'model.safetensors':
        folder = os.path.dirname(src) or '.'
    if folder is None:
        return src, None
    if src == folder:
        src = os.path.join(folder, 'model.safetensors')
        if not os.path.isfile(src):
            raise FileNotFoundError(f'{folder} is a folder without model.safetensors; give a '
                                    'checkpoint file or an export folder (model.safetensors '
                                    'and config.json)')
    try:
        with open(os.path.join(folder, 'config.json')) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return src, None
    arch = config.get('architecture') if isinstance(config, dict) else None
    if isinstance(arch, str) and arch.startswith(('beit', 'vit')):
        return src, 'timm_beit' if arch.startswith('beit') else 'timm_vit'
    return src, 'hf_beit' if isinstance(config, dict) and config.get('model_type') == 'beit' \
        else None


def config_repr(value) -> str:
    """Python source for a value, dicts written as dict(k=v) the way configs spell them."""
    if isinstance(value, dict):
        return 'dict(' + ', '.join(f'{k}={config_repr(v)}' for k, v in value.items()) + ')'
    return repr(value)


def key_groups(keys) -> dict:
    """Keys grouped by their first name (`decoder_blocks.3.mlp.fc1.weight` -> `decoder_blocks`),
    in the order the groups first appear."""
    groups: dict = {}
    for k in keys:
        groups.setdefault(k.split('.', 1)[0], []).append(k)
    return groups


def print_keys(title: str, keys, reasons: dict | None = None, verbose: bool = False) -> None:
    """`title: N`, then each key, or (more than LIST_LIMIT keys, without `verbose`) one line
    per group of names: `  prefix.* (count)`, with the reason its keys share."""
    keys, reasons = list(keys), reasons or {}
    print(f'{title}: {len(keys)}')
    if verbose or len(keys) <= LIST_LIMIT:
        for k in keys:
            print(f'  {k}' + (f'  ({reasons[k]})' if k in reasons else ''))
        return
    for prefix, members in key_groups(keys).items():
        why = {reasons.get(k) for k in members}
        why = f'  ({why.pop()})' if len(why) == 1 and None not in why else ''
        print(f'  {members[0] if len(members) == 1 else f"{prefix}.* ({len(members)})"}{why}')
    print('  (--verbose lists every key)')


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        res = convert_file(args.src, args.dst, args.format, args.img_size, args.per_block_rel_pos,
                           args.num_heads, warn=print)
    except (FileNotFoundError, ValueError) as err:
        print(f'convert_checkpoint: error: {err}', file=sys.stderr)
        return 1
    print(f'source: {args.src} ({res.fmt}, backbone at {res.source})')
    for note in res.notes:
        print(f'note: {note}')
    v = args.verbose
    print_keys('dropped keys (not part of the backbone)', sorted(res.dropped), res.dropped, v)
    print_keys('unrecognised keys (not converted)', res.unrecognised, verbose=v)
    print_keys('missing keys (PeCoViT parameters the file does not provide)', res.missing,
               verbose=v)
    print_keys('unexpected keys (in the file, not in PeCoViT)', res.unexpected, verbose=v)
    print(f'wrote {args.dst}: {res.num_tensors} tensors, {res.num_values / 1e6:.2f} M values')
    args_str = config_repr(res.pecovit_args)[len('dict('):-1]
    print(f'PeCoViT arguments: {args_str}')
    print(f"config: backbone=dict(type='PeCoViT', {args_str}, "
          f"init_cfg=dict(type='Pretrained', checkpoint={args.dst!r}))")
    return 0 if res.ok else 2


if __name__ == '__main__':
    sys.exit(main())
