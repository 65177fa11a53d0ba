"""Time the read check on a large checkpoint against the read itself.

`read_checkpoint` checks every file before torch reads it (`peco_mm/checkpoint/budget.py`:
the zip directory and the pickle's opcodes, played on a model of the unpickler; no tensor
data is read). This tool saves a randomly initialised PeCoViT's state dict (ViT-B by
default: 86M parameters, about 350 MB) into a temporary folder, in the zip format and, with
`--legacy`, the legacy one, and times, each `--repeats` times:

- the check alone (`check_read_budget`);
- `torch.load(weights_only=True)` alone;
- `read_checkpoint` (check, load, the nesting and stored-config checks).

It prints the median and range of each and the machine's load average.
"""
from __future__ import annotations

import argparse
import os
import os.path as osp
import statistics
import sys
import tempfile
import time
sys.path.append(osp.dirname(osp.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

EPILOG = """examples:
  python tools/time_read_check.py --arch base --repeats 3            # ViT-B, zip format
  python tools/time_read_check.py --arch base --repeats 3 --legacy   # and the legacy format
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--arch', default='base', help="PeCoViT's arch (tiny, small, base, large, "
                   'huge; default base)')
    p.add_argument('--repeats', type=int, default=3, help='times each read is timed (3)')
    p.add_argument('--legacy', action='store_true',
                   help='also time the legacy (torch < 1.6, not zip) format')
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f'--repeats {args.repeats}: expected 1 or more')
    return args


def timed(call, repeats: int) -> list[float]:
    """Seconds of each of `repeats` calls of `call()`."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch

    from peco_mm.checkpoint import read_checkpoint
    from peco_mm.checkpoint.budget import check_read_budget
    from peco_mm.models import PeCoViT
    state = PeCoViT(arch=args.arch).state_dict()
    params = sum(v.numel() for v in state.values())
    print(f'PeCoViT arch={args.arch}: {len(state)} tensors, {params / 1e6:.1f}M values; '
          f'torch {torch.__version__}, {torch.get_num_threads()} threads, '
          f'load average before {os.getloadavg()[0]:.2f}')
    formats = [('zip', True)] + ([('legacy', False)] if args.legacy else [])
    with tempfile.TemporaryDirectory() as folder:
        for fmt, zipped in formats:
            path = os.path.join(folder, f'vit_{args.arch}_{fmt}.pth')
            torch.save(state, path, _use_new_zipfile_serialization=zipped)
            reads = {
                'check_read_budget': lambda: check_read_budget(path),
                'torch.load(weights_only=True)': lambda: torch.load(
                    path, map_location='cpu', weights_only=True),
                'read_checkpoint': lambda: read_checkpoint(path),
            }
            print(f'\n{fmt} file: {os.path.getsize(path) / 2**20:.1f} MiB')
            print('| read | median s | range s |\n|---|---:|---:|')
            for what, call in reads.items():
                times = timed(call, args.repeats)
                print(f'| {what} | {statistics.median(times):.4f} | '
                      f'{min(times):.4f} - {max(times):.4f} |')
    print(f'\nload average after {os.getloadavg()[0]:.2f}')


if __name__ == '__main__':
    main()
