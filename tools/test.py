#!/usr/bin/env python3
"""Evaluate a checkpoint with any peco_mm config: the test split's metrics (tokenizer PSNR /
SSIM / codebook usage / codeword probe, top-1 accuracy, mIoU, box and mask AP).

The config's test_dataloader and test_evaluator decide what is measured; the registry scope
comes from its `default_scope`. `--out` writes the predictions (.pkl, as the hosts' test.py
does) or the metrics (.json / .yaml); `--show-dir` switches the host's visualization hook on.
"""
import argparse
import os
import sys
import warnings
sys.path.append(os.path.dirname(os.path.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402 (first: outside the environment, names the fix)

# mmengine 0.10.7 imports pkg_resources, which setuptools deprecates: nothing a user can act on
warnings.filterwarnings('ignore', message='pkg_resources is deprecated', category=UserWarning)
cli = check_environment.light_module('supervisor/cli.py')  # the flags train.py shares; no torch

EPILOG = """\
examples:
  tools/test.py configs/peco/upernet_vitb_ade20k.py work_dirs/upernet/iter_160000.pth
  tools/test.py CONFIG CKPT --out work_dirs/metrics.json   # the metrics as JSON
  tools/test.py CONFIG CKPT --out work_dirs/preds.pkl      # every prediction (pickle)
  tools/test.py CONFIG CKPT --show-dir vis                 # painted predictions
  tools/test.py CONFIG CKPT --cfg-options test_dataloader.dataset.data_root=data/ade
  tools/dist_test.sh CONFIG CKPT 8 [flags]                 # 8 processes (torchrun)
  GPUS=8 tools/slurm_test.sh PARTITION JOB CONFIG CKPT     # slurm
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('config', help='config file path')
    p.add_argument('checkpoint', help='checkpoint file to evaluate')
    p.add_argument('--work-dir', help='where the test log goes (default: the config\'s '
                   'work_dir, else work_dirs/<config name>)')
    p.add_argument('--out', metavar='FILE',
                   help='FILE.pkl: dump every prediction (mmengine DumpResults; mmdet\'s '
                   'DumpDetResults for mmdet configs); FILE.json or FILE.yaml: the metrics')
    p.add_argument('--show-dir', metavar='DIR',
                   help='paint predictions with the host\'s visualization hook: mmpretrain '
                   'writes DIR/<image>_<step>.png, mmdet <work-dir>/<timestamp>/DIR/<image>, '
                   'mmseg DIR/vis_data/vis_image/')
    p.add_argument('--show-interval', type=int, default=1, metavar='N',
                   help='with --show-dir: paint every N-th image (mmpretrain, mmseg; mmdet '
                   'paints every image)')
    cli.add_run_options(p, options_example='test_dataloader.batch_size=8',
                        scripts='dist_test.sh and slurm_test.sh')
    return cli.parse(p, argv)


def main(argv=None):
    args = parse_args(argv)
    cli.check_config(args, 'test.py')
    if args.out and not args.out.endswith(('.pkl', '.pickle', '.json', '.yaml', '.yml')):
        raise SystemExit(f'test.py: --out {args.out}: expected FILE.pkl (predictions) or '
                         'FILE.json / FILE.yaml (metrics)')
    sys.path.insert(0, check_environment.ROOT)  # run from any folder
    cli.launch(args, 'test', checkpoint=args.checkpoint, out=args.out, show_dir=args.show_dir,
               show_interval=args.show_interval)


if __name__ == '__main__':
    main()
