#!/usr/bin/env python
"""Rewrite checkpoints as plain data, loadable by any host in a process of its own.

    python tools/plain_checkpoint.py CKPT_OR_WORK_DIR [...] [--out OUT]

Checkpoints that tools/train.py wrote before checkpoints were plain data hold mmengine's
HistoryBuffer objects in their message hub: `torch.load(path)` (weights-only by default on
torch >= 2.6), `mmengine.runner.load_checkpoint`, mmdet's `init_detector`, mmseg's
`init_model` and mmpretrain's inferencers refuse them with `UnpicklingError ...
HistoryBuffer`. This tool reads each file through peco_mm's safe reader (nothing in it runs),
stores those buffers (and any numpy value) as plain data, and replaces the file atomically
(or writes `--out`, for one file). A `--resume` of the rewritten file continues as before.
A folder stands for every *.pth file in it (a work dir).
"""
# no `from __future__ import annotations`: the tool is also loaded from its file by the tests
import argparse
import glob
import os
import sys
sys.path.append(os.path.dirname(os.path.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EPILOG = """examples:
  tools/plain_checkpoint.py work_dirs/upernet_vitb_ade20k/iter_160000.pth
  tools/plain_checkpoint.py work_dirs/upernet_vitb_ade20k/       # every *.pth in it
  tools/plain_checkpoint.py old.pth --out plain.pth
"""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('paths', nargs='+', help='checkpoint files, or folders of them')
    parser.add_argument('--out', default=None,
                        help='write the plain checkpoint here instead of replacing the file '
                        '(one input file only)')
    return parser.parse_args(argv)


def checkpoint_files(paths: list) -> list:
    """The files `paths` stand for: a file itself, a folder its *.pth files (sorted)."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(glob.glob(os.path.join(path, '*.pth')))
            if not found:
                raise FileNotFoundError(f'{path}: a folder without *.pth files')
            files += found
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise FileNotFoundError(f'checkpoint not found: {path}')
    return files


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        files = checkpoint_files(args.paths)
        if args.out and len(files) != 1:
            raise ValueError(f'--out takes one input file; {len(files)} given')
        from peco_mm.checkpoint.plain import rewrite_as_plain
        for path in files:
            print(rewrite_as_plain(path, args.out))
    except (FileNotFoundError, ValueError, TypeError) as err:
        print(f'plain_checkpoint: error: {err}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
