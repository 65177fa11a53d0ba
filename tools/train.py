"""Train any peco_mm config: tokenizer, MIM pretraining, classification, UperNet, Mask R-CNN.

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp]
                                 [--cfg-options key=value ...]
    tools/dist_train.sh CONFIG NUM_PROCS [same flags]      # torchrun; gloo on CPU

The registry scope comes from the config's `default_scope`; peco_mm types are registered by
`custom_imports` in the config (or by the import below).
"""
import argparse
import os
import os.path as osp
import sys

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))  # run from any folder

import peco_mm  # noqa: E402,F401  (registers peco_mm types)
from mmengine.config import Config, DictAction  # noqa: E402
from mmengine.runner import Runner  # noqa: E402

from peco_mm.engine.launch import (apply_cli, check_dataset_paths, check_pretrained_paths,  # noqa
                                   setup_cpu_distributed)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description='Train a peco_mm config')
    p.add_argument('config', help='config file path')
    p.add_argument('--work-dir', help='where logs and checkpoints go')
    p.add_argument('--resume', nargs='?', const='auto', default=None,
                   help='resume from CKPT, or with no value from the last checkpoint in '
                   'the work dir')
    p.add_argument('--amp', action='store_true', help='mixed precision (CUDA: bf16/fp16)')
    p.add_argument('--cfg-options', nargs='+', action=DictAction,
                   help='override config keys, e.g. train_dataloader.batch_size=8')
    p.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none')
    p.add_argument('--local-rank', '--local_rank', type=int, default=0)
    args = p.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def main(argv=None):
    args = parse_args(argv)
    if not osp.isfile(args.config):
        raise SystemExit(f'train.py: config file {args.config!r} not found')
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    cfg = apply_cli(cfg, args.work_dir, args.config, args.resume, args.amp, args.launcher)
    if not cfg.get('resume'):  # a resumed run takes its weights from the checkpoint
        check_pretrained_paths(cfg)
    check_dataset_paths(cfg, phases=('train', 'val') if cfg.get('val_cfg') else ('train',))
    setup_cpu_distributed(cfg)
    runner = Runner.from_cfg(cfg)
    runner.train()


if __name__ == '__main__':
    main()
