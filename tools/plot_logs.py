#!/usr/bin/env python3
"""Plot a run's training curves from its logs as PNG: losses, codebook usage and perplexity
(tokenizer runs, CodebookHealthHook), and masked-token accuracy (PeCo / PeCo_MAE pretraining).

Reads mmengine's <WORK_DIR>/<timestamp>/vis_data/scalars.json (every timestamp folder of a
work dir, oldest first, so a resumed run is one curve). Writes OUT/<panel>.png for each panel
some run has data for: loss.png, codebook_usage.png, codebook_perplexity.png, accuracy.png;
with --keys, one OUT/custom.png of those keys. Several runs are overlaid, labelled by folder
name.
"""
import argparse
import os.path as osp
import sys
sys.path.append(osp.dirname(osp.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

EPILOG = """examples:
  tools/plot_logs.py work_dirs/tokenizer_vqvae_in1k --out work_dirs/tokenizer_vqvae_in1k/plots
  tools/plot_logs.py work_dirs/demo/tokenizer_lambda1_seed0 work_dirs/demo/tokenizer_lambda0_seed0 \
      --out plots
  tools/plot_logs.py work_dirs/pretrain/20260101_120000/vis_data/scalars.json --out plots \\
      --keys loss mim_acc lr
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('runs', nargs='+', metavar='RUN',
                   help='a work dir, one of its <timestamp> folders, or a scalars.json file')
    p.add_argument('--out', required=True, help='output folder for the PNG files')
    p.add_argument('--keys', nargs='+', help="plot these keys in one panel instead ('loss*': "
                   'every key starting with loss)')
    p.add_argument('--labels', nargs='+', help='legend label per RUN (default: folder names)')
    args = p.parse_args(argv)
    if args.labels and len(args.labels) != len(args.runs):
        p.error(f'--labels: {len(args.labels)} labels for {len(args.runs)} runs')
    return args


def run_label(path: str) -> str:
    """The work dir's name, for a work dir, one of its timestamp folders or a scalars.json."""
    path = osp.normpath(osp.abspath(path))
    if osp.basename(path) == 'scalars.json':  # <work_dir>/<timestamp>/vis_data/scalars.json
        path = osp.dirname(osp.dirname(path))
    if osp.isdir(osp.join(path, 'vis_data')):  # a timestamp folder
        path = osp.dirname(path)
    return osp.basename(path)


def main(argv=None) -> dict:
    args = parse_args(argv)
    sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))
    from peco_mm.tooling.logs import PANELS, plot_runs, read_scalars
    labels = args.labels or [run_label(r) for r in args.runs]
    runs = {}
    for label, path in zip(labels, args.runs):
        try:
            runs[label] = read_scalars(path)
        except (FileNotFoundError, ValueError) as err:
            raise SystemExit(f'plot_logs.py: {err}')
    panels = PANELS if not args.keys else {
        'custom': (', '.join(args.keys), tuple(args.keys), 'value')}
    written = plot_runs(args.out, runs, panels)
    if not written:
        keys = sorted({k for recs in runs.values() for r in recs for k in r})
        raise SystemExit(f'plot_logs.py: none of the panels\' keys are in the logs; keys there: '
                         f'{keys}')
    for name, png in written.items():
        print(f'{name}: {png}')
    return written


if __name__ == '__main__':
    main()
