"""encode() throughput of the PeCo tokenizers against mmpretrain's DALL-E encoder (BEiT's
tokenizer), same machine, same batch, one run.

    python tools/benchmark_tokenizer.py [--batch-size 32] [--iters 10] [--device cuda]
        [--threads N] [--out bench.json]

Rows: PeCo default and lite at 224 px (14x14 codes), the DALL-E encoder at the 112 px BEiT feeds
it (14x14 codes, argmax over 8192 logits), and PeCo default without channels-last, to show
that fast path. Random weights: throughput does not depend on them. On CUDA, PeCo runs in bf16
autocast (its default); the DALL-E encoder runs as mmpretrain ships it (fp32 input).
"""
import argparse
import json
import os.path as osp
import sys
import time

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

import torch  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--batch-size', type=int, default=32)
    p.add_argument('--iters', type=int, default=10)
    p.add_argument('--warmup', type=int, default=2)
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--threads', type=int, default=None, help='torch CPU threads')
    p.add_argument('--skip-dalle', action='store_true')
    p.add_argument('--out', help='write the results as JSON here')
    return p.parse_args(argv)


def build_models(skip_dalle: bool):
    from peco_mm.tokenizer import PeCoTokenizer
    common = dict(with_decoder=False, frozen=True, perceptual_weight=0.0)
    models = [
        ('PeCo (default, 37.5M)', 224, PeCoTokenizer(**common).encode),
        ('PeCo lite (25.7M)', 224, PeCoTokenizer(base_channels=32, channel_mult=(1, 2, 4, 8, 16),
                                                 **common).encode),
        ('PeCo default, no channels-last', 224,
         PeCoTokenizer(channels_last=False, **common).encode),
    ]
    if not skip_dalle:
        from mmpretrain.models.selfsup.cae import DALLEEncoder
        dalle = DALLEEncoder().eval()

        def dalle_encode(x):
            with torch.inference_mode():
                return dalle(x).argmax(1)
        models.append(('DALL-E encoder (BEiT, mmpretrain)', 112, dalle_encode))
    return models


def count_gflops(fn, x) -> float:
    """Forward GFLOPs (multiply-add = 2) of one image, from torch's FLOP counter."""
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        fn(x)
    return counter.get_total_flops() / 1e9


def time_it(fn, x, iters: int, warmup: int) -> float:
    for _ in range(warmup):
        fn(x)
    if x.is_cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        codes = fn(x)
    if x.is_cuda:
        torch.cuda.synchronize()
    assert codes.shape[-2:] == (14, 14), codes.shape
    return (time.perf_counter() - t0) / iters


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    rows = []
    for name, size, fn in build_models(args.skip_dalle):
        owner = getattr(fn, '__self__', None)
        if owner is not None:
            owner.to(dev)
        else:
            fn.__closure__[0].cell_contents.to(dev)
        x = torch.rand(args.batch_size, 3, size, size, device=dev) * 2 - 1
        gflops = count_gflops(fn, x[:1])
        sec = time_it(fn, x, args.iters, args.warmup)
        rows.append(dict(model=name, img_size=size, batch=args.batch_size, gflops=gflops,
                         ms_per_batch=1000 * sec, img_per_s=args.batch_size / sec))
        print(f'{name:38s} {size:4d}px {gflops:6.1f} GFLOPs/img {1000 * sec:9.1f} ms/batch  '
              f'{args.batch_size / sec:8.1f} img/s', flush=True)
    base = rows[0]['img_per_s']
    print('\n| tokenizer | input | GFLOPs / image | img/s | vs PeCo default |\n'
          '|---|---|---|---|---|')
    for r in rows:
        print(f"| {r['model']} | {r['img_size']} px | {r['gflops']:.1f} | "
              f"{r['img_per_s']:.1f} | {r['img_per_s'] / base:.2f}x |")
    print(f'\ndevice: {dev} ({torch.get_num_threads()} threads), batch {args.batch_size}, '
          f'torch {torch.__version__}')
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(dict(device=str(dev), threads=torch.get_num_threads(), rows=rows), f,
                      indent=1)


if __name__ == '__main__':
    main()
