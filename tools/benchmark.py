"""All of the project's speed figures in one run (docs/benchmarks.md): on the CPU, and on CUDA
when present (bf16 autocast there).

    python tools/benchmark.py [--device cpu|cuda] [--batch 32] [--out bench.json]
    python tools/benchmark.py --smoke          # tiny sizes, seconds; for the tests

1. tokenizer encode() throughput: PeCo default, PeCo lite, mmpretrain's DALL-E encoder
   (tools/benchmark_tokenizer.py);
2. pretraining step throughput and peak memory at ViT-B, same batch: PeCo, mmpretrain BEiT,
   mmpretrain MAE, PeCo_MAE (tools/benchmark_pretrain.py);
3. dense training step time, batch 1: UperNet ViT-B 512x512 and Mask R-CNN ViT-B 1333x800
   (tools/benchmark_dense.py; --smoke uses the demo's toy configs).

The three tools stay usable on their own; this script runs them with matching settings and
prints one Markdown block with the command line that produced it.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os.path as osp
import statistics
import sys
import time

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.dirname(osp.abspath(__file__)))

import torch  # noqa: E402

SMOKE_DENSE = ('configs/demo/upernet_tiny_shapes.py', 'configs/demo/mask_rcnn_tiny_shapes.py')


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--batch', type=int, default=32, help='images per step (stages 1 and 2)')
    p.add_argument('--steps', type=int, default=5, help='timed steps / iterations')
    p.add_argument('--threads', type=int, default=None, help='torch CPU threads')
    p.add_argument('--only', nargs='+', choices=('tokenizer', 'pretrain', 'dense'),
                   default=['tokenizer', 'pretrain', 'dense'])
    p.add_argument('--smoke', action='store_true', help='tiny sizes, one step each')
    p.add_argument('--out', help='write the results as JSON here')
    return p.parse_args(argv)


def quiet(fn, *a, **kw):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        out = fn(*a, **kw)
    return out, buf.getvalue()


def bench_tokenizer(args) -> list[dict]:
    import benchmark_tokenizer as bt
    argv = ['--batch-size', str(2 if args.smoke else args.batch), '--iters',
            str(1 if args.smoke else args.steps), '--warmup', '0' if args.smoke else '2',
            '--device', args.device]
    if args.smoke:
        argv.append('--skip-dalle')
    tmp = io.StringIO()
    out_json = osp.join(osp.dirname(osp.abspath(__file__)), '.bench_tokenizer.json')
    with contextlib.redirect_stdout(tmp):
        bt.main(argv + ['--out', out_json])
    with open(out_json) as f:
        rows = json.load(f)['rows']
    import os
    os.remove(out_json)
    return rows


def bench_pretrain(args) -> list[dict]:
    import benchmark_pretrain as bp
    argv = ['--batch', str(args.batch), '--steps', str(args.steps), '--device', args.device]
    if args.device.startswith('cuda'):
        argv += ['--amp', 'bf16']
    if args.smoke:
        argv += ['--smoke']
    res, _ = quiet(bp.main, argv)
    if not args.device.startswith('cuda'):  # CPU: peak resident memory of this process
        import resource
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        for r in res:
            r.setdefault('peak_rss_gib_process', round(rss, 2))
    return res


def bench_dense(args) -> list[dict]:
    import benchmark_dense as bd
    cfgs = SMOKE_DENSE if args.smoke else bd.DEFAULTS
    if args.smoke:  # the toy configs' input sizes instead of 512x512 / 800x1088
        bd.seg_sample.__defaults__ = ((64, 64), 150)
        bd.det_sample.__defaults__ = ((96, 128), )
    rows = []
    for c in cfgs:
        steps = 1 if args.smoke else max(2, min(args.steps, 3))
        (times, params), _ = quiet(bd.step_times, c, steps, args.device)
        t = statistics.median(times[1:] if len(times) > 1 else times)
        rows.append(dict(config=osp.basename(c), params_m=round(params / 1e6, 1),
                         s_per_step=round(t, 3), img_per_s=round(1 / t, 2)))
    return rows


def markdown(res: dict, argv: list[str]) -> str:
    lines = [f"`python tools/benchmark.py {' '.join(argv)}` — {res['device']}, "
             f"{res['threads']} threads, torch {res['torch']}", '']
    if res.get('tokenizer'):
        lines += ['| tokenizer encode | input | img/s |', '|---|---|---:|']
        lines += [f"| {r['model']} | {r['img_size']} px | {r['img_per_s']:.1f} |"
                  for r in res['tokenizer']] + ['']
    if res.get('pretrain'):
        lines += ['| pretraining step | ms/step | img/s | peak memory |', '|---|---:|---:|---:|']
        for r in res['pretrain']:
            mem = (f"{r['peak_mem_gib']} GiB GPU" if 'peak_mem_gib' in r else
                   f"{r.get('peak_rss_gib_process', '-')} GiB RSS (process)")
            lines.append(f"| {r['model']} | {r['ms_per_step']} | {r['img_per_s']} | {mem} |")
        lines.append('')
    if res.get('dense'):
        lines += ['| dense step (batch 1) | params M | s/step | img/s |', '|---|---:|---:|---:|']
        lines += [f"| {r['config']} | {r['params_m']} | {r['s_per_step']} | {r['img_per_s']} |"
                  for r in res['dense']]
    return '\n'.join(lines)


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import peco_mm  # noqa: F401
    res = dict(device=torch.cuda.get_device_name() if args.device.startswith('cuda') else 'CPU',
               threads=torch.get_num_threads(), torch=torch.__version__, smoke=args.smoke)
    for name, fn in (('tokenizer', bench_tokenizer), ('pretrain', bench_pretrain),
                     ('dense', bench_dense)):
        if name in args.only:
            t = time.time()
            print(f'==> {name} ...', flush=True)
            res[name] = fn(args)
            print(f'    {time.time() - t:.0f} s', flush=True)
    print(markdown(res, argv))
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == '__main__':
    main()
