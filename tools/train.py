#!/usr/bin/env python3
"""Train any peco_mm config: the tokenizer, PeCo / PeCo_MAE pretraining, ImageNet fine-tuning,
UperNet on ADE20K, Mask R-CNN on COCO.

The registry scope comes from the config's `default_scope` (mmpretrain, mmseg or mmdet), so
the one launcher serves every config. A config that sets `runner_type='FlexibleRunner'` and a
`strategy` (FSDPStrategy, DeepSpeedStrategy) gets mmengine's FlexibleRunner, as with the hosts'
own tools/train.py. Without CUDA, an AmpOptimWrapper config trains in bf16 autocast on a CPU
with native bf16 and in fp32 on one without (one log line says which and why), and several
processes talk over gloo.
"""
import argparse
import os
import os.path as osp
import sys
import warnings
sys.path.append(os.path.dirname(os.path.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402 (first: outside the environment, names the fix)

# mmengine 0.10.7 imports pkg_resources, which setuptools deprecates: nothing a user can act on
warnings.filterwarnings('ignore', message='pkg_resources is deprecated', category=UserWarning)
cli = check_environment.light_module('supervisor/cli.py')  # the flags test.py shares; no torch

ROOT = check_environment.ROOT

EPILOG = """\
examples:
  tools/train.py configs/peco/pretrain_vitb_in1k_300e.py --work-dir work_dirs/peco
  tools/train.py CONFIG --resume                      # continue from the work dir's last ckpt
  tools/train.py CONFIG --cfg-options train_dataloader.batch_size=64 \\
      train_dataloader.dataset.data_root=data/imagenet
  tools/train.py CONFIG --auto-scale-lr               # lr x total batch / base_batch_size
  tools/train.py CONFIG --no-validate --vis-backend tensorboard
  tools/train.py CONFIG --preflight-only              # every check of the run, start nothing
  tools/dist_train.sh CONFIG 8 [flags]                # 8 processes on this node (torchrun)
  NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 tools/dist_train.sh CONFIG 8   # node 0 of 2
  GPUS=16 tools/slurm_train.sh PARTITION JOB CONFIG   # slurm
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('config', help='config file path')
    p.add_argument('--work-dir', help='where logs and checkpoints go (default: the config\'s '
                   'work_dir, else work_dirs/<config name>)')
    p.add_argument('--resume', nargs='?', const='auto', default=None, metavar='CKPT',
                   help='resume from CKPT, or with no value from the last checkpoint in '
                   'the work dir')
    p.add_argument('--amp', action='store_true',
                   help='mixed precision: AmpOptimWrapper, bf16 where the GPU supports it, '
                   'else fp16 with a dynamic loss scale (without CUDA: bf16 autocast on a CPU '
                   'with native bf16, else fp32; one log line)')
    p.add_argument('--auto-scale-lr', action='store_true',
                   help='scale the lr linearly by the total batch (processes x '
                   'train_dataloader.batch_size) over auto_scale_lr.base_batch_size')
    p.add_argument('--no-validate', action='store_true',
                   help='run no validation loop during training')
    cli.add_run_options(p, options_example='train_dataloader.batch_size=8 '
                        'optim_wrapper.optimizer.lr=1e-3',
                        scripts='dist_train.sh and slurm_train.sh')
    p.add_argument('--preflight-only', action='store_true',
                   help='run every check of the run (the checkpoints and datasets the config '
                   'reads, unknown keys, the flags), list what fails or print a one-line '
                   'summary, and exit (dist_train.sh runs this before torchrun starts any rank)')
    return cli.parse(p, argv)


def preflight_only(args) -> int:
    """Every check of the run, nothing started; 0 when all pass. The inputs first, with
    peco_mm/supervisor/preflight.py loaded on its own (no torch: missing files are named in a
    second, before torchrun starts any rank); once they are all there, the launcher's other
    checks (unknown keys, the flags; `import peco_mm`), which end in a one-line summary."""
    pre = check_environment.light_module('supervisor/preflight.py')
    cfg = pre.load(args.config, args.cfg_options, no_validate=args.no_validate)
    cfg.work_dir = args.work_dir or cfg.get('work_dir') or osp.join(
        'work_dirs', osp.splitext(osp.basename(args.config))[0])  # as the run picks it
    problems = pre.find_problems(cfg, 'train', resume=args.resume)
    if problems:
        print(pre.report(problems, args.config), file=sys.stderr)
        return 1
    sys.path.insert(0, ROOT)
    return cli.check_all(args, 'train', files_checked=True, resume=args.resume, amp=args.amp,
                         no_validate=args.no_validate, auto_scale_lr=args.auto_scale_lr)


def main(argv=None):
    args = parse_args(argv)
    cli.check_config(args, 'train.py')
    if args.preflight_only:
        raise SystemExit(preflight_only(args))
    sys.path.insert(0, ROOT)  # run from any folder
    cli.launch(args, 'train', resume=args.resume, amp=args.amp, no_validate=args.no_validate,
               auto_scale_lr=args.auto_scale_lr)


if __name__ == '__main__':
    main()
