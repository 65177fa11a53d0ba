#!/usr/bin/env python3
"""Speed and memory figures of peco_mm (docs/benchmarks.md), one sub-command each:

  tokenizer  encode() throughput: PeCo default, PeCo lite, PeCo without channels-last, and
             mmpretrain's DALL-E encoder (BEiT's tokenizer) at the same 14x14 code grid
  pretrain   one MIM pretraining step (forward, backward, AdamW) at the same batch and ViT-B:
             PeCo (tokenizer included), mmpretrain's BEiT and MAE, PeCo_MAE
  dense      one training step of configs (default: UperNet and Mask R-CNN ViT-B at batch 1)
  data       a config's train pipeline per sample: the data-loader workers' share (default:
             PeCo's pretraining pipeline against BEiT's two-view one)
  all        tokenizer + pretrain + dense with matching settings
  memory     the peak memory of a config's training step at given batch sizes: measured on
             CUDA; on the CPU measured at small batches and extrapolated linearly (estimated)
  gpu-check  one report for a GPU machine: mmcv ops against the CPU, bf16 code agreement,
             bf16 throughput and MFU against the card's peak, memory at the paper's batch with
             and without with_cp, a 2-GPU DDP / FSDP step; without CUDA its CPU part only

Weights are random (speed and memory do not depend on them); inputs are synthetic (a config's
step runs its own train pipeline on a random photo), so data loading is not measured. Each
run prints a Markdown block headed by the command that produced it; --out also writes JSON.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
sys.path.append(str(Path(__file__).resolve().parent))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

ROOT = Path(__file__).resolve().parents[1]
DENSE = ['configs/peco/upernet_vitb_ade20k.py', 'configs/peco/mask_rcnn_vitb_coco.py']
DENSE_SMOKE = ['configs/demo/upernet_tiny_shapes.py', 'configs/demo/mask_rcnn_tiny_shapes.py']
PRETRAIN_MODELS = ('peco', 'beit', 'mae', 'peco_mae')
DATA = ['configs/peco/pretrain_vitb_in1k_300e.py',
        'configs/peco/pretrain_beit_dalle_vitb_in1k_300e.py']
EPILOG = """examples:
  tools/benchmark.py all --batch 32 --steps 5 --out bench.json    # everything, CPU or CUDA
  tools/benchmark.py all --smoke                                   # tiny sizes, seconds
  tools/benchmark.py tokenizer --batch 8 --steps 3 --threads 2
  tools/benchmark.py pretrain --batch 8 --steps 2 --warmup 1 --threads 2 --device cpu \
      --malloc stock reuse --repeats 3    # allocator off / on, 3 fresh processes each
  tools/benchmark.py pretrain --batch 64 --amp bf16 --device cuda
  tools/benchmark.py dense configs/peco/upernet_vitl_ade20k.py --steps 3
  tools/benchmark.py data --steps 300 --repeats 3    # pipeline ms / sample, PeCo vs BEiT
  tools/benchmark.py memory configs/peco/pretrain_vitl_in1k_800e.py --batch 64 128 256
  tools/benchmark.py memory configs/peco/pretrain_vitl_in1k_800e.py --batch 256 \\
      --cfg-options model.backbone.with_cp=True
  tools/benchmark.py gpu-check --tokenizer TOKENIZER.pth --report gpu_check.md
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument('--device', help='cpu, cuda, cuda:1 (default: cuda when available)')
    common.add_argument('--threads', type=int, help='torch CPU threads')
    common.add_argument('--out', help='also write the results as JSON here')
    common.add_argument('--malloc', nargs='+', choices=('auto', 'reuse', 'stock'),
                        default=['auto'], help="CPU allocator, as env_cfg.cpu_malloc in "
                        "training (auto: reuse without CUDA); several: each in its own process")
    common.add_argument('--repeats', type=int, default=1,
                        help='run the whole measurement N times, each in a fresh process, and '
                        'report the median and range over them (1)')
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
    d = add('dense', 'one training step of configs (UperNet, Mask R-CNN, TimeSformer)', 1, 2, 1)
    a = add('all', 'tokenizer + pretrain + dense (dense at batch 1)', 32, 5, 2)
    da = add('data', "a config's train pipeline, ms per sample (--steps samples)", 1, 300, 10)
    da.add_argument('configs', nargs='*', help=f'default: {" ".join(DATA)}')
    da.add_argument('--cfg-options', nargs='+', default=[], metavar='KEY=VALUE',
                    help='override keys of every config, e.g. '
                    'train_dataloader.dataset.pipeline.3.second_size=224')
    for s in (t, a):
        s.add_argument('--no-dalle', action='store_true', help="skip mmpretrain's DALL-E encoder")
    for s in (t, pre, a):
        s.add_argument('--precision', nargs='+', choices=('fp32', 'bf16'),
                       help='run each of these precisions: the encoders (tokenizer) and the '
                       'step (pretrain) in fp32 or in bf16 autocast, each against the GEMM rate '
                       'of the same precision (default: tokenizer fp32; pretrain as --amp)')
    for s in (pre, a):
        s.add_argument('--models', nargs='+', choices=PRETRAIN_MODELS, default=PRETRAIN_MODELS)
        s.add_argument('--amp', choices=('none', 'bf16', 'fp16'),
                       help='autocast dtype (default: bf16 on CUDA, none on CPU)')
        s.add_argument('--target-bf16', action='store_true',
                       help="PeCo's frozen target encoder in bf16 autocast (default: its "
                       '`encode_bf16`, which is off; fp32 on a CPU)')
        s.add_argument('--target-contiguous', action='store_true',
                       help="PeCo's frozen target encoder in the contiguous memory format "
                       '(default: channels-last, as the tokenizer)')
        s.add_argument('--compile-target', action='store_true',
                       help="PeCo's frozen target encoder through torch.compile (compiled "
                       'during the warm-up steps: give --warmup 2 or more)')
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
    g = sub.add_parser('gpu-check', parents=[common],
                       help='one Markdown report for a GPU machine (without CUDA: the CPU '
                       'part, listing what it skipped)',
                       description='mmcv ops on the GPU against the CPU, bf16 code agreement '
                       'of a tokenizer, bf16 throughput and MFU of encode and of the ViT-B '
                       'pretraining step (batch 64) against the card\'s peak, memory of ViT-B / '
                       'ViT-L at 256 per GPU with and without with_cp, and a DDP / FSDP step on '
                       'two GPUs. Without CUDA: the code agreement on the CPU; the rest is '
                       'listed as skipped.')
    g.add_argument('--tokenizer', help='a trained tokenizer checkpoint for the code agreement '
                   '(default: the paper architecture, random weights)')
    g.add_argument('--report', default='gpu_check.md', help='Markdown report (gpu_check.md)')
    g.add_argument('--batch', type=int, default=64, help='batch of the MFU rows (64)')
    g.add_argument('--steps', type=int, default=5, help='timed steps, median (5)')
    g.add_argument('--warmup', type=int, default=2, help='untimed steps (2)')
    g.add_argument('--images', type=int, default=64, help='images for the code agreement (64; '
                   'at most 8 without CUDA)')
    g.add_argument('--smoke', action='store_true', help='tiny sizes, for a quick check')
    g.add_argument('--distributed-on-cpu', action='store_true',
                   help='without two GPUs: run the DDP / FSDP step on two CPU processes (gloo)')
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f'--repeats {args.repeats}: expected 1 or more')
    if args.command == 'memory' and len(set(args.measure)) < 2:
        p.error(f'--measure needs two or more different batch sizes, got {args.measure}')
    return args


# ---- Markdown --------------------------------------------------------------------------------
def of_peak(gflop_per_s: float, peak: float) -> str:
    return f'{gflop_per_s:.0f} ({gflop_per_s / peak:.0%})'


def md_tokenizer(rows: list, peak: float) -> list[str]:
    base = rows[0]['img_per_s']
    out = ['| tokenizer encode | input | GFLOPs / image | img/s | vs PeCo default | '
           'GFLOP/s (of GEMM) |', '|---|---|---:|---:|---:|---:|']
    return out + [f"| {r['model']} | {r['img_size']} px | {r['gflops']:.1f} | "
                  f"{r['img_per_s']:.2f} | {r['img_per_s'] / base:.2f}x | "
                  f"{of_peak(r['gflop_per_s'], r.get('of_gemm', peak))} |"
                  for r in rows]


def md_pretrain(rows: list, peak: float) -> list[str]:
    ref = next((r['ms_per_step'] for r in rows if r['model'] == 'beit'), None)
    out = ['| pretraining step | ms/step | img/s | vs BEiT | GFLOPs / step | GFLOP/s (of GEMM) | '
           'trainable M | target gen. M | peak GPU memory |',
           '|---|---:|---:|---:|---:|---:|---:|---:|---:|']
    for r in rows:
        ratio = f"{r['ms_per_step'] / ref:.2f}" if ref else '-'
        mem = f"{r['peak_mem_gib']} GiB" if 'peak_mem_gib' in r else '-'
        out.append(f"| {r['model']} | {r['ms_per_step']} | {r['img_per_s']} | {ratio} | "
                   f"{r['gflops_per_step']} | "
                   f"{of_peak(r['gflop_per_s'], r.get('of_gemm', peak))} | {r['trainable_m']} | "
                   f"{r['target_generator_m']} | {mem} |")
    return out


# the row name and the figure each timing section is compared on
REPEAT_KEYS = dict(tokenizer=('model', 'img_per_s'), pretrain=('model', 'ms_per_step'),
                   dense=('config', 's_per_step'), data=('config', 'ms_per_sample'))


def num(v: float) -> str:
    """4 significant digits, without an exponent."""
    return f'{v:.0f}' if abs(v) >= 1000 else f'{v:.4g}'


def md_repeats(runs: list[dict]) -> list[str]:
    """Median and range over fresh-process runs, one row per (section, row, allocator)."""
    lines = []
    for section, (key, value) in REPEAT_KEYS.items():
        table: dict = {}
        for run in runs:
            for r in run.get(section, []):
                table.setdefault((r[key], run['malloc']), []).append(r)
        if not table:
            continue
        n = max(len(v) for v in table.values())
        lines += [f'| {section} | malloc | {value} (median of {n} runs) | min - max | '
                  'GFLOP/s (of GEMM) |', '|---|---|---:|---:|---:|']
        for (name, malloc), rows in table.items():
            vals = sorted(r[value] for r in rows)
            flops = '-'
            if 'gflop_per_s' in rows[0]:
                gemm = [r['of_gemm'] for r in rows if 'of_gemm' in r] or [
                    run['gemm_gflops'] for run in runs]
                flops = of_peak(statistics.median(r['gflop_per_s'] for r in rows),
                                statistics.median(gemm))
            lines.append(f'| {name} | {malloc} | {num(statistics.median(vals))} | '
                         f'{num(vals[0])} - {num(vals[-1])} | {flops} |')
        lines.append('')
    return lines


def md_data(rows: list) -> list[str]:
    out = ['| train pipeline | ms / sample | views | input KiB / sample |', '|---|---:|---:|---:|']
    return out + [f"| {r['config']} | {r['ms_per_sample']} | {r['views']} | {r['input_kib']} |"
                  for r in rows]


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
    from peco_mm.tooling import benchmark as bm
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
    from peco_mm.tooling import benchmark as bm
    res, lines = {}, []
    cmd, smoke = args.command, args.smoke
    precisions = getattr(args, 'precision', None) or []
    if cmd in ('tokenizer', 'pretrain', 'all'):  # the sections with GFLOP/s columns
        res['gemm_gflops'] = round(bm.gemm_gflops(args.device), 1)
        lines += [f"GEMM peak of this machine: {res['gemm_gflops']} GFLOP/s (fp32 2048x2048 "
                  'matmul, median of 5); GFLOP/s columns count multiply-add as 2.', '']
        if 'bf16' in precisions:
            import torch

            from peco_mm.engine.optimizers import cpu_has_native_bf16
            # emulated bf16 (a CPU without it) runs a 2048^2 matmul for minutes: 512^2 there
            n = 2048 if args.device.startswith('cuda') or cpu_has_native_bf16() else 512
            res['gemm_gflops_bf16'] = round(bm.gemm_gflops(args.device, torch.bfloat16, n), 1)
            lines += [f"bf16 GEMM rate: {res['gemm_gflops_bf16']} GFLOP/s ({n}x{n} matmul in "
                      'bf16); bf16 rows are compared with it.', '']
    gemm = dict(fp32=res.get('gemm_gflops'), bf16=res.get('gemm_gflops_bf16'))
    steps, warmup = (1, 0) if smoke else (args.steps, args.warmup)
    if cmd in ('tokenizer', 'all'):
        batch = 2 if smoke else args.batch
        res['tokenizer'] = []
        for prec in precisions or [None]:
            rows = bm.bench_tokenizers(batch, steps, warmup, args.device, not args.no_dalle,
                                       smoke, None if prec is None else prec == 'bf16')
            res['tokenizer'] += [with_precision(r, 'model', prec, gemm) for r in rows]
        lines += md_tokenizer(res['tokenizer'], res['gemm_gflops']) + ['']
    if cmd in ('pretrain', 'all'):
        batch = min(args.batch, 4) if smoke else args.batch
        amp = args.amp or ('bf16' if args.device.startswith('cuda') else 'none')
        res['pretrain'] = []
        for prec in precisions or [None]:
            amp = amp if prec is None else {'fp32': 'none', 'bf16': 'bf16'}[prec]
            rows = bm.bench_pretrain(args.models, batch, steps, warmup, args.device, amp, smoke,
                                     args.target_bf16, not args.target_contiguous,
                                     args.compile_target)
            res['pretrain'] += [with_precision(r, 'model', prec, gemm) for r in rows]
        lines += [f'{"smoke sizes" if smoke else "ViT-B/16 at 224 px"}, batch {batch}, amp '
                  f"{amp if not precisions else ' / '.join(precisions)}, median of {steps} "
                  'steps (forward + backward + AdamW)', '']
        lines += md_pretrain(res['pretrain'], res['gemm_gflops']) + ['']
    if cmd == 'data':
        configs = [c if Path(c).exists() else str(ROOT / c) for c in args.configs or DATA]
        res['data'] = bm.bench_pipelines(configs, 20 if smoke else args.steps, args.warmup,
                                         parse_options(args.cfg_options))
        lines += md_data(res['data']) + ['']
    if cmd in ('dense', 'all'):
        configs = args.configs or (DENSE_SMOKE if smoke else DENSE)
        configs = [c if Path(c).exists() else str(ROOT / c) for c in configs]
        batch = 1 if cmd == 'all' else args.batch
        res['dense'] = bm.bench_config_steps(configs, batch, steps, warmup, args.device)
        lines += md_dense(res['dense']) + ['']
    return res, lines


def run_gpu_check(args, argv: list[str]) -> dict:
    """The report of peco_mm.tooling.gpu_check, printed and written to --report."""
    from peco_mm.tooling.gpu_check import run_gpu_check as check
    res, lines = check(str(ROOT), args.device, args.tokenizer, args.batch, args.steps,
                       args.warmup, args.images, args.smoke, args.distributed_on_cpu,
                       log=lambda msg: print(f'# {msg}', flush=True))
    lines[1:1] = ['', f"`python tools/benchmark.py {' '.join(argv)}`"]
    text = '\n'.join(lines).rstrip() + '\n'
    Path(args.report).write_text(text)
    print(text + f'\n(written to {args.report})')
    res['command'] = ['tools/benchmark.py', *argv]
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1, default=str))
    if res['failed']:
        sys.exit(f"gpu-check: {len(res['failed'])} section(s) failed: "
                 f"{', '.join(f['section'] for f in res['failed'])} (see {args.report})")
    return res


def with_precision(row: dict, key: str, precision: str | None, gemm: dict) -> dict:
    """A row of a --precision run: its precision, its name tagged with it, and the GEMM rate of
    the same precision to compare with (`of_gemm`)."""
    if precision is None:
        return row
    return dict(row, **{key: f'{row[key]} [{precision}]'}, precision=precision,
                of_gemm=gemm[precision])


def without_flags(argv: list[str], arity: dict[str, int]) -> list[str]:
    """argv minus each flag of `arity` (`--flag=value` too) and the values it took."""
    out, skip = [], 0
    for a in argv:
        if skip:
            skip -= 1
        elif a in arity:
            skip = arity[a]
        elif a.split('=', 1)[0] not in arity:
            out.append(a)
    return out


def run_repeats(args, argv: list[str]) -> dict:
    """Each (repeat, allocator) in a fresh process, allocators interleaved; the median and
    range over the repeats."""
    child = without_flags(argv, {'--malloc': len(args.malloc), '--repeats': 1, '--out': 1})
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for mode in args.malloc:
                out = Path(tmp) / f'{i}_{mode}.json'
                cmd = [sys.executable, __file__, *child, '--malloc', mode, '--out', str(out)]
                print(f'# run {i + 1}/{args.repeats}, --malloc {mode}', flush=True)
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                runs.append(json.loads(out.read_text()))
    res = dict(runs=runs, command=['tools/benchmark.py', *argv])
    gemm = sorted(r['gemm_gflops'] for r in runs if 'gemm_gflops' in r)
    print(f"`python tools/benchmark.py {' '.join(argv)}`: {runs[0]['device']}, "
          f"{runs[0]['threads']} threads, torch {runs[0]['torch']}, {args.repeats} fresh "
          'processes per allocator' +
          (f'; GEMM peak {gemm[0]} - {gemm[-1]} GFLOP/s' if gemm else '') + '\n')
    print('\n'.join(md_repeats(runs)).rstrip())
    return res


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    timing = args.command not in ('memory', 'gpu-check')
    if timing and (args.repeats > 1 or len(args.malloc) > 1):
        res = run_repeats(args, argv)
        if args.out:
            Path(args.out).write_text(json.dumps(res, indent=1, default=str))
        return res
    sys.path.insert(0, str(ROOT))
    import torch

    import peco_mm  # noqa: F401  (registers peco_mm types)
    from peco_mm.utils.malloc import apply_cpu_malloc, resolve_mode
    if args.threads:
        torch.set_num_threads(args.threads)
    args.device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    cuda = args.device.startswith('cuda')
    malloc = resolve_mode(args.malloc[0], cuda)  # recorded with the results
    apply_cpu_malloc(malloc, cuda)
    if args.command == 'gpu-check':
        return run_gpu_check(args, argv)
    res, lines = (run_memory if args.command == 'memory' else run_timing)(args)
    res.update(environment(args.device), malloc=malloc, command=['tools/benchmark.py', *argv])
    print(f"`python tools/benchmark.py {' '.join(argv)}`: {res['device']}, {res['threads']} "
          f"threads, torch {res['torch']}, malloc {malloc}\n")
    print('\n'.join(lines).rstrip())
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(res, f, indent=1, default=str)
    return res


if __name__ == '__main__':
    main()
