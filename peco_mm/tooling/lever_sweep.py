"""Each step lever alone, in one process (tools/gpu_bench.sh):

    python -m peco_mm.tooling.lever_sweep [--device cuda] [--batch 256] [--steps 5]
        [--warmup 3] [--smoke] [--out levers.json]

PeCo's pretraining step (`benchmark.bench_pretrain`, bf16 autocast) with an eager target as
the reference, then each lever of docs/benchmarks.md ("Step levers") switched on alone against
it, the compiled step last (its compile fills the warm-up). One process for all of them: the
interpreter's start, the imports and CUDA's initialisation are paid once, not per lever, which
is what filled the 25-second limits of one process per lever.
"""
from __future__ import annotations

import argparse

# (row, levers changed from the reference: an eager target, everything else as shipped)
LEVERS = [
    ('reference: eager target', dict()),
    ('target channels-last', dict(target_layout=True)),
    ('bf16 target', dict(target_bf16=True)),
    ('target in chunks of 64', dict(target_chunk=64)),
    ('SDPA efficient kernel', dict(sdpa='efficient')),
    ('fused AdamW', dict(fused_adamw=True)),
    ('compiled step', dict(compile_step=True)),
]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--device', help='default: cuda when available')
    p.add_argument('--batch', type=int, default=256, help='images per step (256)')
    p.add_argument('--steps', type=int, default=5, help='timed steps, median (5)')
    p.add_argument('--warmup', type=int, default=3, help='untimed steps (3)')
    p.add_argument('--smoke', action='store_true', help='tiny sizes (tests)')
    p.add_argument('--out', help='also write the results as JSON here')
    return p.parse_args(argv)


def sweep(device: str, batch: int, steps: int, warmup: int, smoke: bool,
          out: str | None = None) -> list[dict]:
    """A row per lever (`LEVERS`), each tagged with its name in `lever`; a lever the device
    cannot run (e.g. SDPA's efficient kernel on a CPU) gets its error instead of timings.
    `out` is rewritten after each lever, so a run stopped by its time limit keeps its rows."""
    from .benchmark import bench_pretrain
    from .tool_runs import save_json
    rows = []
    for name, levers in LEVERS:
        kw = dict(dict(target_compile=False), **levers)
        try:
            row = bench_pretrain(['peco'], batch, steps, warmup, device, 'bf16', smoke, **kw)[0]
        except Exception as err:  # report it, measure the other levers
            reason = (str(err).strip().splitlines() or [''])[0][:200]
            rows.append(dict(lever=name, error=f'{type(err).__name__}: {reason}'))
            print(f'# {name}: failed ({rows[-1]["error"]})', flush=True)
        else:
            rows.append(dict(row, lever=name))
            print(f'# {name}: {row["ms_per_step"]} ms / step', flush=True)
        save_json(out, dict(rows=rows, device=device, batch=batch))
    return rows


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    import torch

    from .bench_report import md_pretrain
    device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    rows = sweep(device, args.batch, args.steps, args.warmup, args.smoke, args.out)
    ok = [r for r in rows if 'error' not in r]
    ref = rows[0].get('ms_per_step')
    print(f'PeCo pretraining step on {device}, bf16, batch {args.batch}, median of '
          f'{args.steps} steps; each lever alone against the eager-target step\n')
    print('\n'.join(md_pretrain(ok, float('inf'))))
    print('\n| lever | ms / step | vs reference |\n|---|---:|---:|\n' + '\n'.join(
        f"| {r['lever']} | {r['error']} | - |" if 'error' in r else
        f"| {r['lever']} | {r['ms_per_step']} | "
        f"{r['ms_per_step'] / ref if ref else float('nan'):.2f}x |" for r in rows))
    return rows


if __name__ == '__main__':
    main()
