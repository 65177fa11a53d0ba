"""The frozen target's device defaults checked where they apply (tools/gpu_bench.sh):

    python -m peco_mm.tooling.target_check [--device cuda] [--batch 64] [--out codes.json]

The paper tokenizer (random weights, as `tools/benchmark.py` uses) encodes the same smooth
random images twice: with `FrozenPeCoTokenizer`'s defaults on the device (on CUDA:
contiguous and compiled) and eagerly in channels-last (the layout before the defaults went
by device). It prints the share of codes that agree, whether the compile fell back, and each
way's encode time. Random weights put many codes near a tie, so a kernel's last-bit
difference can flip a few: the share, not bit equality, is the figure on a GPU.
"""
from __future__ import annotations

import argparse
import statistics


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--device', help='default: cuda when available')
    p.add_argument('--batch', type=int, default=64, help='images (64)')
    p.add_argument('--size', type=int, default=224, help='image side (224)')
    p.add_argument('--steps', type=int, default=5, help='timed encodes, median (5)')
    p.add_argument('--smoke', action='store_true', help='a tiny tokenizer (tests)')
    p.add_argument('--out', help='also write the results as JSON here')
    return p.parse_args(argv)


def smooth_images(batch: int, size: int, device: str):
    """Random images upsampled from an 8x8 grid, in [-1, 1] (photo-like: few exact ties)."""
    import torch
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    low = torch.rand(batch, 3, 8, 8, generator=g) * 2 - 1
    return F.interpolate(low, size=size, mode='bicubic', align_corners=False).clamp(-1, 1
                                                                                    ).to(device)


def check_target(device: str, batch: int, size: int, steps: int, smoke: bool) -> dict:
    import torch

    from ..tokenizer import FrozenPeCoTokenizer, cnn_parts
    from ..tokenizer.encoding import compiles_encoder, encode_memory_format
    from .config_step import random_tokenizer_checkpoint
    from .timing import time_steps
    torch.manual_seed(0)
    path = random_tokenizer_checkpoint(cnn_parts(8, (1, 2, 2), 1) if smoke else {})
    default = FrozenPeCoTokenizer(path).to(device)
    eager = FrozenPeCoTokenizer(path, channels_last=True, compile_encoder=False).to(device)
    x = smooth_images(batch, size, device)
    codes = {}
    times = {}
    for name, tok in (('default', default), ('eager channels-last', eager)):
        codes[name] = tok.encode(x, bf16=False)  # the first call compiles where it does
        times[name] = statistics.median(time_steps(lambda: tok.encode(x, bf16=False), steps,
                                                   1, device)) * 1000
    same = (codes['default'] == codes['eager channels-last']).float().mean().item()
    return dict(device=device, batch=batch, size=size, agreement=same,
                default_layout=str(encode_memory_format('auto', device)).split('.')[-1],
                default_compiled=compiles_encoder('auto', device),
                compile_fell_back=bool(default.__dict__.get('_compile_failed')),
                ms_default=round(times['default'], 2),
                ms_eager_channels_last=round(times['eager channels-last'], 2))


def main(argv=None) -> dict:
    args = parse_args(argv)
    import torch

    from peco_mm.tooling.tool_runs import save_json
    device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    res = check_target(device, args.batch, args.size, args.steps, args.smoke)
    print(f"Target codes on {device} (batch {res['batch']}, {res['size']} px, fp32 encode): "
          f"default = {res['default_layout']}, "
          f"{'compiled' if res['default_compiled'] else 'eager'}"
          f"{' (compile failed: eager)' if res['compile_fell_back'] else ''}\n\n"
          '| encode | ms / batch | codes equal to eager channels-last |\n|---|---:|---:|\n'
          f"| default | {res['ms_default']} | {res['agreement']:.4%} |\n"
          f"| eager channels-last | {res['ms_eager_channels_last']} | 100% |")
    save_json(args.out, res)
    return res


if __name__ == '__main__':
    main()
