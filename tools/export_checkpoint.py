#!/usr/bin/env python
"""Export a PeCo checkpoint to timm or Hugging Face transformers.

    python tools/export_checkpoint.py SRC DST --to timm|hf [--kind K] [--per-block-rel-pos]
                                      [--overwrite-readme]

SRC: any checkpoint tools/convert_checkpoint.py reads; typically a PeCo pretraining run, a
fine-tuned classifier (mmpretrain ImageClassifier, its head included) or a dense run
(mmseg / mmdet: its `backbone.*`). DST: a folder, written with

  --to timm  model.safetensors in timm's BEiT names (or VisionTransformer's, for a ViT with a
             qkv bias and no relative positions), config.json in timm's hub layout, README.md;
             load it with  timm.create_model('local-dir:DST', pretrained=True)
  --to hf    model.safetensors and config.json (BeitConfig) for BeitForImageClassification,
             BeitForMaskedImageModeling or BeitModel, preprocessor_config.json normalising as
             the run did, README.md (model card from the run, with the citation); load it with
             transformers.AutoModel.from_pretrained('DST') or the printed BeitFor* class

A README.md already in DST that differs from the card written now is kept and the export
refused, unless --overwrite-readme.

The exact loading calls are printed, with every note on what the target format cannot hold.
The source is read with the safe loader (weights only). A file that pickles other Python
objects is converted once with tools/convert_checkpoint.py (which reads them as inert
stand-ins), and the converted file exported.
"""
# no `from __future__ import annotations`: the tool is also loaded from its file by the tests
import argparse
import os
import sys
sys.path.append(os.path.dirname(os.path.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EPILOG = """examples:
  tools/export_checkpoint.py work_dirs/finetune_vitb_in1k/epoch_100.pth peco_vitb_timm --to timm
  tools/export_checkpoint.py work_dirs/pretrain_vitb_in1k_800e/epoch_800.pth peco_vitb_mim --to hf
  tools/export_checkpoint.py work_dirs/upernet_vitb_ade20k/iter_160000.pth vitb_ade --to hf
"""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('src', help='source checkpoint (.pth / .safetensors)')
    parser.add_argument('dst', help='output folder')
    parser.add_argument('--to', required=True, choices=('timm', 'hf'), help='target library')
    parser.add_argument('--kind', default=None, choices=('classifier', 'mim', 'backbone'),
                        help='what to export (default: from the run: a classifier with its '
                        'head, a pretraining run with its MIM head, else the backbone); '
                        'backbone drops any head')
    parser.add_argument('--per-block-rel-pos', action='store_true',
                        help='timm: copy a shared relative-position table into every block')
    parser.add_argument('--overwrite-readme', action='store_true',
                        help='replace a README.md in DST that differs from the model card '
                        'written now (default: refuse, keeping it)')
    parser.add_argument('--num-heads', type=int, default=None,
                        help='attention heads, for weights that do not record them (no '
                        'relative-position table) and a run without a stored config')
    return parser.parse_args(argv)


def export_file(src: str, dst: str, to: str, kind=None, per_block_rel_pos: bool = False,
                num_heads=None, overwrite_readme: bool = False):
    """Read `src`, export it for `to`, write the folder `dst`; return (Export, paths)."""
    from peco_mm.checkpoint import read_checkpoint
    from peco_mm.tooling.export import read_export_source, to_hf, to_timm, write_export

    ckpt = read_checkpoint(src)
    source = read_export_source(ckpt, src, kind, num_heads)
    if to == 'timm':
        exp = to_timm(source, per_block_rel_pos)
    else:
        if per_block_rel_pos:
            raise ValueError('--per-block-rel-pos is for --to timm; the transformers export '
                             'keeps the source layout (shared or per block)')
        exp = to_hf(source)
    return exp, write_export(exp, dst, overwrite_readme), source


def main(argv=None) -> int:
    args = parse_args(argv)
    from peco_mm.tooling.export import describe, timm_file_call
    try:
        exp, paths, source = export_file(args.src, args.dst, args.to, args.kind,
                                         args.per_block_rel_pos, args.num_heads,
                                         args.overwrite_readme)
    except (FileNotFoundError, ValueError, ImportError) as err:
        print(f'export_checkpoint: error: {err}', file=sys.stderr)
        return 1
    what = exp.config.get('architecture') or exp.config['architectures'][0]
    print(f'source: {args.src} ({source.kind})')
    for note in exp.notes:
        print(f'note: {note}')
    print(f'wrote {args.dst} ({what}): {describe(exp)}')
    for path in paths:
        print(f'  {path}')
    print(f'load: {exp.load_call.format(dst=args.dst)}')
    if args.to == 'timm':
        print(f'load the file alone: {timm_file_call(exp, args.dst)}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
