"""Evaluate a checkpoint with any peco_mm config.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--cfg-options ...]
    tools/dist_test.sh CONFIG CHECKPOINT NUM_PROCS [same flags]
"""
import argparse
import os
import os.path as osp
import sys

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

import peco_mm  # noqa: E402,F401
from mmengine.config import Config, DictAction  # noqa: E402
from mmengine.runner import Runner  # noqa: E402

from peco_mm.engine.launch import apply_cli, check_dataset_paths, setup_cpu_distributed  # noqa


def parse_args(argv=None):
    p = argparse.ArgumentParser(description='Test a peco_mm checkpoint')
    p.add_argument('config')
    p.add_argument('checkpoint')
    p.add_argument('--work-dir')
    p.add_argument('--out', help='dump raw predictions to this pickle file')
    p.add_argument('--cfg-options', nargs='+', action=DictAction)
    p.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none')
    p.add_argument('--local-rank', '--local_rank', type=int, default=0)
    args = p.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def main(argv=None):
    args = parse_args(argv)
    if not osp.isfile(args.config):
        raise SystemExit(f'test.py: config file {args.config!r} not found')
    if not osp.isfile(args.checkpoint):
        raise SystemExit(f'test.py: checkpoint {args.checkpoint!r} not found')
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    cfg = apply_cli(cfg, args.work_dir, args.config, None, False, args.launcher)
    cfg.load_from = args.checkpoint
    if args.out:
        from mmengine.evaluator import DumpResults
        dump = dict(type=DumpResults.__name__, out_file_path=args.out)
        evs = cfg.test_evaluator if isinstance(cfg.test_evaluator, list) else [cfg.test_evaluator]
        cfg.test_evaluator = list(evs) + [dump]
    check_dataset_paths(cfg, phases=('test',))
    setup_cpu_distributed(cfg)
    runner = Runner.from_cfg(cfg)
    runner.test()


if __name__ == '__main__':
    main()
