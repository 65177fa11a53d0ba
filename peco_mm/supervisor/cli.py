"""The command line tools/train.py and tools/test.py share: the flags of a run and its start.

`add_run_options` adds the flags both tools take (`--vis-backend`, `--cfg-options`,
`--show-config`, `--skip-preflight`, `--launcher`); `parse` reads them as torchrun expects
(`--local-rank`); `check_config` stops on a missing config file before anything is imported;
`launch` runs the config through `peco_mm.supervisor.launch.run` and reports a missing input in
one block, without a traceback.

Until `launch`, this module imports only the standard library and mmengine's `DictAction` (no
torch), so that a tool loads it by its path (`tools/check_environment.py:light_module`) and
answers `--help`, a bad flag or a missing config without the seconds `import peco_mm` takes.
"""
from __future__ import annotations

import argparse
import os
import os.path as osp

from mmengine.config import DictAction

VIS_BACKEND_NAMES = ('local', 'tensorboard', 'wandb', 'mlflow')  # launch.VIS_BACKENDS's keys
LAUNCHERS = ('none', 'pytorch', 'slurm', 'mpi')


def add_run_options(parser: argparse.ArgumentParser, *, options_example: str,
                    scripts: str) -> None:
    """The flags of a run: `options_example` shows `--cfg-options` (KEY=VALUE ...), `scripts`
    names the tool's launch scripts (e.g. 'dist_train.sh and slurm_train.sh')."""
    parser.add_argument('--vis-backend', action='append', default=[], choices=VIS_BACKEND_NAMES,
                        help='also log scalars to this backend (repeatable); the package it '
                        'needs (tensorboard, wandb, mlflow) must be installed')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                        help=f'override config keys, e.g. {options_example}')
    parser.add_argument('--show-config', action='store_true',
                        help='print the config, the hook table and the keys the launcher '
                        'changed on the console too (they always go to the run\'s log file)')
    parser.add_argument('--skip-preflight', action='store_true',
                        help='do not check the config\'s checkpoints and datasets before '
                        'building anything (or set PECO_SKIP_PREFLIGHT=1)')
    parser.add_argument('--launcher', choices=LAUNCHERS, default='none',
                        help=f'job launcher ({scripts} set it)')
    parser.add_argument('--local-rank', '--local_rank', type=int, default=0,
                        help=argparse.SUPPRESS)


def parse(parser: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """The parsed flags; torchrun's `--local-rank` also as LOCAL_RANK (mmengine reads it)."""
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def check_config(args: argparse.Namespace, tool: str) -> None:
    """Stop with one line when the config file is missing; `--skip-preflight` as the
    environment variable the launcher reads."""
    if not osp.isfile(args.config):
        raise SystemExit(f'{tool}: config file {args.config!r} not found')
    if args.skip_preflight:
        os.environ['PECO_SKIP_PREFLIGHT'] = '1'


def check_all(args: argparse.Namespace, mode: str, files_checked: bool = False,
              **flags) -> int:
    """Every check of a run without starting it (`--preflight-only`): the steps of the
    launcher that act on nothing (unknown keys, the flags, the label classes; the inputs
    unless `files_checked`), on rank 0's view of the machine. Prints one line: what is wrong,
    or a short summary (with `--show-config`, the keys the launcher would change). Returns the
    exit status."""
    import sys
    from peco_mm.supervisor.changes import block
    from peco_mm.supervisor.launch import plan
    from peco_mm.supervisor.preflight import PreflightError
    tool = f'{mode}.py'
    try:
        _, changes = plan(args.config, args.work_dir, args.cfg_options, mode,
                          skip=('pre-flight',) if files_checked else (), **flags)
    except PreflightError as err:
        print(str(err), file=sys.stderr)
        return 1
    except (ValueError, KeyError, TypeError, FileNotFoundError, ModuleNotFoundError) as err:
        print(f'{tool}: {args.config}: {err.args[0] if err.args else err}', file=sys.stderr)
        return 1
    n = len(changes)
    print(f'{tool}: pre-flight of {args.config} passed: every checkpoint and dataset it reads '
          f'is in place and every key is known; the launcher changes {n} key'
          f'{"s" if n != 1 else ""} of it (' + ('listed below' if args.show_config else
                                               '--show-config lists them')
          + '). Nothing was started.')
    if args.show_config:
        print(block(changes))
    return 0


def launch(args: argparse.Namespace, mode: str, **flags) -> None:
    """Run `args.config` in `mode` ('train' or 'test') with the shared flags and the tool's own
    (`flags`, e.g. checkpoint=, resume=); every missing checkpoint and dataset is listed in one
    block without a traceback; every rank waits for the others, then leaves the process
    group."""
    from peco_mm.supervisor.distributed import finish
    from peco_mm.supervisor.launch import run
    from peco_mm.supervisor.preflight import PreflightError, exit_message
    try:
        run(args.config, args.work_dir, args.cfg_options, mode, launcher=args.launcher,
            vis_backends=tuple(args.vis_backend), show_config=args.show_config, **flags)
    except PreflightError as err:
        raise SystemExit(exit_message(err))
    finish()
