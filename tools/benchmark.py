#!/usr/bin/env python3
"""Speed and memory figures of peco_mm (docs/benchmarks.md), one sub-command each:

  tokenizer  encode() throughput: PeCo default, PeCo lite, PeCo without channels-last, and
             mmpretrain's DALL-E encoder (BEiT's tokenizer) at the same 14x14 code grid
  pretrain   one MIM pretraining step (forward, backward, AdamW) at the same batch and ViT-B:
             PeCo (tokenizer included), mmpretrain's BEiT and MAE, PeCo_MAE
  dense      one training step of configs (default: UperNet and Mask R-CNN ViT-B at batch 1)
  all        tokenizer + pretrain + dense with matching settings
  memory     the peak memory of a config's training step at given batch sizes: measured on
             CUDA; on the CPU measured at small batches and extrapolated linearly (estimated)

Weights are random (speed and memory do not depend on them); inputs are synthetic (a config's
step runs its own train pipeline on a random photo), so data loading is not measured. Each
run prints a Markdown block headed by the command that produced it; --out also writes JSON.
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DENSE = ['configs/peco/upernet_vitb_ade20k.py', 'configs/peco/mask_rcnn_vitb_coco.py']
DENSE_SMOKE = ['configs/demo/upernet_tiny_shapes.py', 'configs/demo/mask_rcnn_tiny_shapes.py']
PRETRAIN_MODELS = ('peco', 'beit', 'mae', 'peco_mae')
EPILOG = """examples:
  tools/benchmark.py all --batch 32 --steps 5 --out bench.json    # everything, CPU or CUDA
  tools/benchmark.py all --smoke                                   # tiny sizes, seconds
  tools/benchmark.py tokenizer --batch 8 --steps 3 --threads 2
  tools/benchmark.py pretrain --batch 64 --amp bf16 --device cuda
  tools/benchmark.py dense configs/peco/upernet_vitl_ade20k.py --steps 3
  tools/benchmark.py memory configs/peco/pretrain_vitl_in1k_800e.py --batch 64 128 256
  tools/benchmark.py memory configs/peco/pretrain_vitl_in1k_800e.py --batch 256 \\
      --cfg-options model.backbone.with_cp=True
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument('--device', help='cpu, cuda, cuda:1 (default: cuda when available)')
    common.add_argument('--threads', type=int, help='torch CPU threads')
    common.add_argument('--out', help='also write the results as JSON here')
    sub = p.add_subparsers(dest='command', required=True, metavar='COMMAND')

    def add(name, help_, batch, steps, warmup):
        s = sub.add_parser(name, parents=[common], help=help_, description=help_)
        s.add_argument('--batch', type=int, default=batch, help=f'images per step ({batch})')
        s.add_argument('--steps', type=int, default=steps, help=f'timed steps, median ({steps})')
        s.add_argument('--warmup', type=int, default=warmup, help=f'untimed steps ({warmup})')
        s.add_argument('--smoke', action='store_true', help='tiny sizes, for a quick check')
        return s

    t = add('tokenizer', 'tokenizer encode() throughput', 32, 10, 2)
    pre = add('pretrain', 'one MIM pretraining step: PeCo, BEiT, MAE, PeCo_MAE', 64, 10, 3)
    d = add('dense', 'one training step of configs (UperNet, Mask R-CNN)', 1, 2, 1)
    a = add('all', 'tokenizer + pretrain + dense (dense at batch 1)', 32, 5, 2)
    for s in (t, a):
        s.add_argument('--no-dalle', action='store_true', help="skip mmpretrain's DALL-E encoder")
    for s in (pre, a):
        s.add_argument('--models', nargs='+', choices=PRETRAIN_MODELS, default=PRETRAIN_MODELS)
        s.add_argument('--amp', choices=('none', 'bf16', 'fp16'),
                       help='autocast dtype (default: bf16 on CUDA, none on CPU)')
    for s in (d, a):
        s.add_argument('configs', nargs='*', help=f'default: {" ".join(DENSE)} (with --smoke '
                       "the demo's toy configs)")
    m = sub.add_parser('memory', parents=[common], help='peak memory of a config\'s training '
                       'step at given batch sizes (estimated on CPU)',
                       description='Peak tensor memory of one training step (data '
                       'preprocessor, forward, backward, optimizer update; the second of two '
                       'steps, with the optimizer state). CUDA: torch.cuda.max_memory_allocated '
                       'at each --batch. CPU: the bytes of live tensors measured at the '
                       '--measure batches, a line over batch size fitted to the peak of each '
                       'phase (end of forward, backward, update), the largest at each --batch, '
                       'marked "estimated".')
    m.add_argument('config')
    m.add_argument('--batch', type=int, nargs='+',
                   help="per-GPU batch sizes (default: the config's train_dataloader.batch_size)")
    m.add_argument('--measure', type=int, nargs='+', default=[2, 4, 8],
                   help='CPU: batches measured for the fits (2 4 8); larger ones when the '
                   'output warns that the peaks are not linear')
    m.add_argument('--amp', choices=('auto', 'none', 'bf16', 'fp16'), default='auto',
                   help="autocast dtype; auto: what the config's optim_wrapper uses (AMP "
                   'wrappers need CUDA, so on CPU the same dtype runs under torch.autocast)')
    m.add_argument('--cfg-options', nargs='+', default=[], metavar='KEY=VALUE',
                   help='override config keys, e.g. model.backbone.with_cp=True')
    args = p.parse_args(argv)
    if args.command == 'memory' and len(set(args.measure)) < 2:
        p.error(f'--measure needs two or more different batch sizes, got {args.measure}')
    return args


# ---- Markdown --------------------------------------------------------------------------------
def md_tokenizer(rows: list) -> list[str]:
    base = rows[0]['img_per_s']
    out = ['| tokenizer encode | input | GFLOPs / image | img/s | vs PeCo default |',
           '|---|---|---:|---:|---:|']
    return out + [f"| {r['model']} | {r['img_size']} px | {r['gflops']:.1f} | "
                  f"{r['img_per_s']:.1f} | {r['img_per_s'] / base:.2f}x |" for r in rows]


def md_pretrain(rows: list) -> list[str]:
    ref = next((r['ms_per_step'] for r in rows if r['model'] == 'beit'), None)
    out = ['| pretraining step | ms/step | img/s | vs BEiT | trainable M | target gen. M | '
           'peak GPU memory |', '|---|---:|---:|---:|---:|---:|---:|']
    for r in rows:
        ratio = f"{r['ms_per_step'] / ref:.2f}" if ref else '-'
        mem = f"{r['peak_mem_gib']} GiB" if 'peak_mem_gib' in r else '-'
        out.append(f"| {r['model']} | {r['ms_per_step']} | {r['img_per_s']} | {ratio} | "
                   f"{r['trainable_m']} | {r['target_generator_m']} | {mem} |")
    return out


def md_dense(rows: list) -> list[str]:
    out = ['| training step | batch | params M | s/step | img/s |', '|---|---:|---:|---:|---:|']
    return out + [f"| {r['config']} | {r['batch']} | {r['params_m']} | {r['s_per_step']} | "
                  f"{r['img_per_s']} |" for r in rows]


def md_memory(res: dict) -> list[str]:
    gib, mib = 2**30, 2**20
    if not res['estimated']:
        head = [f"Peak tensor memory of one training step, measured on {res['device']} "
                f"(torch.cuda.max_memory_allocated). amp: {res['amp']}.", '']
    else:
        m = res['model']
        batches = list(m['measured'])
        head = [f"Peak tensor memory of one training step, **estimated**: measured on "
                f"{res['device']} at batch {', '.join(map(str, batches))} and extrapolated "
                f"linearly per phase (amp: {res['amp']}):", '',
                '| phase | ' + ' | '.join(f'batch {b} (measured)' for b in batches) +
                ' | fixed + per image |', '|---|' + '---:|' * (len(batches) + 1)]
        for p in m['fixed']:
            head.append(f'| {p} | ' + ' | '.join(f"{m['measured'][b][p] / gib:.2f} GiB"
                                                 for b in batches) +
                        f" | {m['fixed'][p] / gib:.2f} GiB + {m['per_image'][p] / mib:.1f} MiB |")
        head += ['', f"Largest residual of the fits: {m['max_residual'] / mib:.1f} MiB."]
        if m['max_residual'] > 0.01 * max(m['measured'][batches[-1]].values()):
            head.append('WARNING: the peaks are not linear over these batches (at small '
                        'batches the backward peak is set by the gradients, not the '
                        'activations): measure at larger batches.')
        head.append('')
    tag = ' (estimated)' if res['estimated'] else ''
    rows = [f"| {b} | {v / gib:.1f} GiB{tag} |" + (f" {res['phase'][b]} |" if tag else '')
            for b, v in res['peak'].items()]
    return head + ['| batch per GPU | peak memory |' + (' peak in |' if tag else ''),
                   '|---:|---:|' + ('---|' if tag else '')] + rows


def environment(device: str) -> dict:
    import torch
    name = torch.cuda.get_device_name(device) if device.startswith('cuda') else 'CPU'
    return dict(device=name, threads=torch.get_num_threads(), torch=torch.__version__)


# ---- sub-commands ----------------------------------------------------------------------------
def parse_options(pairs: list[str]) -> dict:
    """KEY=VALUE pairs as --cfg-options reads them (Python literals, else strings)."""
    import ast
    options = {}
    for kv in pairs:
        if '=' not in kv:
            raise SystemExit(f'benchmark.py: --cfg-options {kv!r}: expected KEY=VALUE')
        key, value = kv.split('=', 1)
        try:
            options[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            options[key] = value
    return options


def run_memory(args) -> tuple[dict, list[str]]:
    from peco_mm.utils import benchmark as bm
    if not Path(args.config).is_file():
        raise SystemExit(f'benchmark.py memory: config {args.config!r} not found')
    cfg = bm.load_config(args.config, parse_options(args.cfg_options))
    targets = args.batch or [int(cfg.train_dataloader.batch_size)]
    res = bm.plan_memory(cfg, targets, args.device, args.measure, args.amp)
    if res['estimated']:
        m = res.pop('model')
        res['phase'] = {b: m.phase_at(b) for b in res['peak']}
        res['model'] = dict(fixed=m.fixed, per_image=m.per_image, measured=m.measured,
                            max_residual=m.max_residual())
    res['config'] = args.config
    return res, md_memory(res)


def run_timing(args) -> tuple[dict, list[str]]:
    """tokenizer / pretrain / dense / all; --smoke: tiny sizes, one or two steps."""
    from peco_mm.utils import benchmark as bm
    res, lines = {}, []
    cmd, smoke = args.command, args.smoke
    steps, warmup = (1, 0) if smoke else (args.steps, args.warmup)
    if cmd in ('tokenizer', 'all'):
        batch = 2 if smoke else args.batch
        res['tokenizer'] = bm.bench_tokenizers(batch, steps, warmup, args.device,
                                               not args.no_dalle, smoke)
        lines += md_tokenizer(res['tokenizer']) + ['']
    if cmd in ('pretrain', 'all'):
        batch = min(args.batch, 4) if smoke else args.batch
        amp = args.amp or ('bf16' if args.device.startswith('cuda') else 'none')
        res['pretrain'] = bm.bench_pretrain(args.models, batch, steps, warmup, args.device, amp,
                                            smoke)
        lines += [f'{"smoke sizes" if smoke else "ViT-B/16 at 224 px"}, batch {batch}, amp '
                  f'{amp}, median of {steps} steps (forward + backward + AdamW)', '']
        lines += md_pretrain(res['pretrain']) + ['']
    if cmd in ('dense', 'all'):
        configs = args.configs or (DENSE_SMOKE if smoke else DENSE)
        configs = [c if Path(c).exists() else str(ROOT / c) for c in configs]
        batch = 1 if cmd == 'all' else args.batch
        res['dense'] = bm.bench_config_steps(configs, batch, steps, warmup, args.device)
        lines += md_dense(res['dense']) + ['']
    return res, lines


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch

    import peco_mm  # noqa: F401  (registers peco_mm types)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    res, lines = (run_memory if args.command == 'memory' else run_timing)(args)
    res.update(environment(args.device), command=['tools/benchmark.py', *argv])
    print(f"`python tools/benchmark.py {' '.join(argv)}`: {res['device']}, {res['threads']} "
          f"threads, torch {res['torch']}\n")
    print('\n'.join(lines).rstrip())
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(res, f, indent=1, default=str)
    return res


if __name__ == '__main__':
    main()
