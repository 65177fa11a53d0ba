#!/usr/bin/env python3
"""Evaluate a checkpoint with any peco_mm config: the test split's metrics (tokenizer PSNR /
SSIM / codebook usage / codeword probe, top-1 accuracy, mIoU, box and mask AP).

The config's test_dataloader and test_evaluator decide what is measured; the registry scope
comes from its `default_scope`. `--out` writes the predictions (.pkl, as the hosts' test.py
does) or the metrics (.json / .yaml); `--show-dir` switches the host's visualization hook on.
"""
import argparse
import os
import os.path as osp
import sys
import warnings
sys.path.append(os.path.dirname(os.path.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

# mmengine 0.10.7 imports pkg_resources, which setuptools deprecates: nothing a user can act on
warnings.filterwarnings('ignore', message='pkg_resources is deprecated', category=UserWarning)
from mmengine.config import DictAction  # noqa: E402 (light: no torch)

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
    p.add_argument('--vis-backend', action='append', default=[],
                   choices=['local', 'tensorboard', 'wandb', 'mlflow'],
                   help='also log to this backend (repeatable; its package must be installed)')
    p.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                   help='override config keys, e.g. test_dataloader.batch_size=8')
    p.add_argument('--show-config', action='store_true',
                   help='print the config and the hook table on the console too (they always '
                   'go to the run\'s log file)')
    p.add_argument('--skip-preflight', action='store_true',
                   help='do not check the config\'s checkpoints and datasets before building '
                   'anything (or set PECO_SKIP_PREFLIGHT=1)')
    p.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none',
                   help='job launcher (dist_test.sh and slurm_test.sh set it)')
    p.add_argument('--local-rank', '--local_rank', type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def main(argv=None):
    args = parse_args(argv)
    if not osp.isfile(args.config):
        raise SystemExit(f'test.py: config file {args.config!r} not found')
    if args.out and not args.out.endswith(('.pkl', '.pickle', '.json', '.yaml', '.yml')):
        raise SystemExit(f'test.py: --out {args.out}: expected FILE.pkl (predictions) or '
                         'FILE.json / FILE.yaml (metrics)')
    if args.skip_preflight:
        os.environ['PECO_SKIP_PREFLIGHT'] = '1'
    sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))  # run from any folder
    from peco_mm.supervisor.launch import run
    from peco_mm.supervisor.distributed import finish
    from peco_mm.supervisor.preflight import PreflightError, exit_message
    try:  # a missing checkpoint or dataset: every one listed in one block, no traceback
        run(args.config, args.work_dir, args.cfg_options, 'test', checkpoint=args.checkpoint,
            launcher=args.launcher, out=args.out, show_dir=args.show_dir,
            show_interval=args.show_interval, vis_backends=tuple(args.vis_backend),
            show_config=args.show_config)
    except PreflightError as err:
        raise SystemExit(exit_message(err))
    finish()  # every rank waits, then leaves the process group


if __name__ == '__main__':
    main()
