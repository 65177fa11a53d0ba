#!/usr/bin/env python3
"""Speed and memory figures of peco_mm (docs/benchmarks.md), one sub-command each:

  tokenizer  encode() throughput: PeCo default, PeCo lite, PeCo without channels-last, and
             mmpretrain's DALL-E encoder (BEiT's tokenizer) at the same 14x14 code grid
  tokenizer-train  the tokenizer's training step (losses, backward, Adam) at the shipped
             configs' size and per-GPU batch, plain and adversarial, fp32 and bf16
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
import subprocess
import sys
import tempfile
from pathlib import Path
sys.path.append(str(Path(__file__).resolve().parent))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from any folder
# peco_mm.tooling.benchmark.SDPA_BACKENDS (imported late: --help imports no torch)
SDPA_BACKENDS = ('default', 'flash', 'efficient', 'cudnn', 'math')
DENSE = ['configs/peco/upernet_vitb_ade20k.py', 'configs/peco/mask_rcnn_vitb_coco.py']
DENSE_SMOKE = ['configs/demo/upernet_tiny_shapes.py', 'configs/demo/mask_rcnn_tiny_shapes.py']
PRETRAIN_MODELS = ('peco', 'beit', 'mae', 'peco_mae')
SETTING = {'auto': 'auto', 'on': True, 'channels-last': True, 'off': False, 'contiguous': False}
DATA = ['configs/peco/pretrain_vitb_in1k_300e.py',
        'configs/peco/pretrain_beit_dalle_vitb_in1k_300e.py']
CHAIN_HELP = ('Tokenizer, PeCo pretraining, UperNet and Mask R-CNN, each its shipped config '
              'for --iters iterations through tools/train.py (--no-validate) on synthetic '
              'data in its host\'s layout (ImageNet, ADE20K, COCO), each stage reading the '
              'previous one\'s checkpoint; per stage the s/iteration, the data wait\'s share, '
              'the peak GPU memory, and the paper schedule\'s wall time on --gpus GPUs.')
EPILOG = """examples:
  tools/benchmark.py all --batch 32 --steps 5 --out bench.json    # everything, CPU or CUDA
  tools/benchmark.py all --smoke                                   # tiny sizes, seconds
  tools/benchmark.py tokenizer --batch 8 --steps 3 --threads 2
  tools/benchmark.py tokenizer-train --device cuda    # the shipped sizes, fp32 and bf16
  tools/benchmark.py pretrain --batch 8 --steps 2 --warmup 1 --threads 2 --device cpu \
      --malloc stock reuse --repeats 3    # allocator off / on, 3 fresh processes each
  tools/benchmark.py pretrain --batch 64 --amp bf16 --device cuda
  tools/benchmark.py dense configs/peco/upernet_vitl_ade20k.py --steps 3
  tools/benchmark.py data --steps 300 --repeats 3    # pipeline ms / sample, PeCo vs BEiT
  tools/benchmark.py memory configs/peco/pretrain_vitl_in1k_800e.py --batch 64 128 256
  tools/benchmark.py memory configs/peco/pretrain_vitl_in1k_800e.py --batch 256 \\
      --cfg-options model.backbone.with_cp=True
  tools/benchmark.py gpu-check --tokenizer TOKENIZER.pth --report gpu_check.md
  tools/benchmark.py chain --gpus 8 --out chain.json    # the chain's cost, on a GPU machine
  tools/benchmark.py chain --smoke --device cpu         # the same stages at toy size
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
    tt = add('tokenizer-train', "the tokenizer's training step; batch: the config's", None, 5, 2)
    tt.add_argument('--variants', nargs='+', default=['default', 'adversarial'],
                    choices=('default', 'adversarial'), help='configs/peco/tokenizer_vqvae_'
                    'in1k.py, its adversarial variant (both); --precision default: both')
    pre = add('pretrain', 'one MIM pretraining step: PeCo, BEiT, MAE, PeCo_MAE', 64, 10, 3)
    d = add('dense', 'one training step of configs (UperNet, Mask R-CNN, TimeSformer)', 1, 2, 1)
    a = add('all', 'tokenizer + pretrain + dense (dense at batch 1)', 32, 5, 2)
    da = add('data', "a config's train pipeline, ms per sample (--steps samples), step by step "
             'from the JPEG on, and the workers per GPU that keep up', 256, 300, 10)
    add_data_options(da)
    for s in (t, a):
        s.add_argument('--no-dalle', action='store_true', help="skip mmpretrain's DALL-E encoder")
    for s in (t, tt, pre, a):
        s.add_argument('--precision', nargs='+', choices=('fp32', 'bf16'),
                       help='run each of these precisions: the encoders (tokenizer) and the '
                       'step (pretrain) in fp32 or in bf16 autocast, each against the GEMM rate '
                       'of the same precision (default: tokenizer fp32; pretrain as --amp)')
    for s in (pre, a):
        add_step_levers(s)
    for s in (d, a):
        s.add_argument('configs', nargs='*', help=f'default: {" ".join(DENSE)} (with --smoke '
                       "the demo's toy configs)")
    add_memory(sub, common)
    add_chain(sub, common)
    add_gpu_check(sub, common)
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f'--repeats {args.repeats}: expected 1 or more')
    if args.command == 'memory' and len(set(args.measure)) < 2:
        p.error(f'--measure needs two or more different batch sizes, got {args.measure}')
    return args


def add_data_options(da) -> None:
    """The data sub-command's own options."""
    da.add_argument('configs', nargs='*', help=f'default: {" ".join(DATA)}')
    da.add_argument('--cfg-options', nargs='+', default=[], metavar='KEY=VALUE',
                    help='override keys of every config, e.g. '
                    'train_dataloader.dataset.pipeline.3.second_size=224')
    da.add_argument('--step-s', type=float, default=0.39,
                    help='the GPU step the workers must keep up with, in seconds (0.39: the '
                    'bf16 ViT-B step at batch 256 on one H100, docs/benchmarks.md)')
    da.add_argument('--cores-per-gpu', type=int,
                    help="the cores one rank's loader has (default: this machine's over its "
                    'GPUs)')


def add_step_levers(s) -> None:
    """The pretraining step's levers (docs/benchmarks.md, "Step levers")."""
    s.add_argument('--models', nargs='+', choices=PRETRAIN_MODELS, default=PRETRAIN_MODELS)
    s.add_argument('--amp', choices=('none', 'bf16', 'fp16'),
                   help='autocast dtype (default: bf16 on CUDA, none on CPU)')
    s.add_argument('--target-bf16', action='store_true',
                   help="PeCo's frozen target encoder in bf16 autocast (default: its "
                   '`encode_bf16`, which is off; fp32 on a CPU)')
    s.add_argument('--target-layout', choices=('auto', 'channels-last', 'contiguous'),
                   default='auto', help="PeCo's frozen target encoder's memory format "
                   '(auto: its default by device, channels-last on a CPU, contiguous on '
                   'CUDA)')
    s.add_argument('--target-contiguous', dest='target_layout', action='store_const',
                   const='contiguous', help='--target-layout contiguous')
    s.add_argument('--target-compile', choices=('auto', 'on', 'off'), default='auto',
                   help="PeCo's frozen target encoder through torch.compile (auto: its "
                   'default, on CUDA only; compiled in the warm-up steps: --warmup 2+)')
    s.add_argument('--compile-target', dest='target_compile', action='store_const',
                   const='on', help='--target-compile on')
    s.add_argument('--target-chunk', type=int, default=0, metavar='N',
                   help="PeCo's target encoded N images at a time (0: the whole batch)")
    s.add_argument('--sdpa', choices=SDPA_BACKENDS, default='default',
                   help='the attention kernel F.scaled_dot_product_attention may use '
                   '(default: any, as shipped)')
    s.add_argument('--fused-adamw', action='store_true',
                   help="AdamW's fused kernel (default: torch's foreach)")
    s.add_argument('--compile-step', action='store_true',
                   help="the model's forward and loss through torch.compile (as mmengine's "
                   'compile=True does for train_step; compiled in the warm-up steps)')


def add_memory(sub, common) -> None:
    """The memory sub-command."""
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


def add_chain(sub, common) -> None:
    """The chain sub-command."""
    c = sub.add_parser('chain', parents=[common], help='the documented chain through '
                       'tools/train.py on synthetic data, and the paper schedule\'s cost',
                       description=CHAIN_HELP)
    c.add_argument('--iters', type=int, default=10, help='iterations per stage (10)')
    c.add_argument('--skip', type=int, default=3, help='first iterations left out of the '
                   'medians: cuDNN tuning, the target encoder\'s compile (3)')
    c.add_argument('--gpus', type=int, default=8, help='GPUs of the projection (8)')
    c.add_argument('--work-dir', help='where the data, logs and checkpoints go (default: a '
                   'temporary folder, removed at the end)')
    c.add_argument('--smoke', action='store_true', help="the demo's toy configs of the same "
                   'stages on tiny images, 2 iterations each (for the CPU and the tests)')


def add_gpu_check(sub, common) -> None:
    """The gpu-check sub-command."""
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


def environment(device: str) -> dict:
    import torch
    name = torch.cuda.get_device_name(device) if device.startswith('cuda') else 'CPU'
    return dict(device=name, threads=torch.get_num_threads(), torch=torch.__version__)


# ---- sub-commands ----------------------------------------------------------------------------
def run_memory(args) -> tuple[dict, list[str]]:
    from peco_mm.tooling.bench_report import md_memory
    from peco_mm.tooling import benchmark as bm
    from peco_mm.tooling.config_step import parse_options
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
    from peco_mm.tooling.bench_report import (md_dense, md_pretrain, md_tokenizer,
                                              with_precision)
    from peco_mm.tooling import benchmark as bm
    res, lines = {}, []
    cmd, smoke = args.command, args.smoke
    precisions = getattr(args, 'precision', None) or (
        ['fp32', 'bf16'] if cmd == 'tokenizer-train' else [])
    if cmd in ('tokenizer', 'tokenizer-train', 'pretrain', 'all'):  # the sections with GFLOP/s columns
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
    if cmd == 'tokenizer-train':
        lines += run_tokenizer_train(args, res, precisions, gemm, steps, warmup)
    if cmd in ('pretrain', 'all'):
        batch = min(args.batch, 4) if smoke else args.batch
        amp = args.amp or ('bf16' if args.device.startswith('cuda') else 'none')
        res['pretrain'] = []
        for prec in precisions or [None]:
            amp = amp if prec is None else {'fp32': 'none', 'bf16': 'bf16'}[prec]
            rows = bm.bench_pretrain(
                args.models, batch, steps, warmup, args.device, amp, smoke, args.target_bf16,
                SETTING[args.target_layout], SETTING[args.target_compile], args.target_chunk,
                args.sdpa, args.fused_adamw, args.compile_step)
            res['pretrain'] += [with_precision(r, 'model', prec, gemm) for r in rows]
        lines += [f'{"smoke sizes" if smoke else "ViT-B/16 at 224 px"}, batch {batch}, amp '
                  f"{amp if not precisions else ' / '.join(precisions)}, median of {steps} "
                  'steps (forward + backward + AdamW)', '']
        lines += md_pretrain(res['pretrain'], res['gemm_gflops']) + ['']
    if cmd == 'data':
        configs = [c if Path(c).exists() else str(ROOT / c) for c in args.configs or DATA]
        lines += run_data(args, configs, res)
    if cmd in ('dense', 'all'):
        configs = args.configs or (DENSE_SMOKE if smoke else DENSE)
        configs = [c if Path(c).exists() else str(ROOT / c) for c in configs]
        batch = 1 if cmd == 'all' else args.batch
        res['dense'] = bm.bench_config_steps(configs, batch, steps, warmup, args.device)
        lines += md_dense(res['dense']) + ['']
    return res, lines


def run_tokenizer_train(args, res: dict, precisions: list[str], gemm: dict, steps: int,
                        warmup: int) -> list[str]:
    """The tokenizer's training step per variant and precision; smoke: batch 2."""
    from peco_mm.tooling import tokenizer_train_bench as tb
    res['tokenizer_train'] = tb.bench_tokenizer_train(
        args.variants, precisions, 2 if args.smoke else args.batch, steps, warmup, args.device,
        args.smoke, gemm)
    return tb.md_tokenizer_train(res['tokenizer_train']) + ['']


def run_data(args, configs: list[str], res: dict) -> list[str]:
    """The pipelines on random photos (views, bytes), then step by step on JPEGs."""
    from peco_mm.tooling.bench_report import md_data, md_data_steps
    from peco_mm.tooling import benchmark as bm
    from peco_mm.tooling import data_bench as db
    from peco_mm.tooling.config_step import parse_options
    samples, batch = (20, 8) if args.smoke else (args.steps, args.batch)
    options = parse_options(args.cfg_options)
    res['data'] = bm.bench_pipelines(configs, samples, args.warmup, options)
    with tempfile.TemporaryDirectory() as tmp:
        res['data_steps'] = db.bench_transforms(configs, 8 if args.smoke else samples,
                                                args.warmup, batch, tmp, options)
    cores = args.cores_per_gpu or db.cores_per_gpu()
    res.update(cores_per_gpu=cores, default_workers=db.default_workers(cores))
    return md_data(res['data']) + [''] + md_data_steps(
        res['data_steps'], args.step_s, cores, res['default_workers']) + ['']


def run_chain(args) -> tuple[dict, list[str]]:
    """The chain in --work-dir (or a temporary folder): rows and the Markdown table."""
    from peco_mm.tooling.chain import md_chain
    from peco_mm.tooling.chain import run_chain as chain
    iters, skip = (2, 0) if args.smoke else (args.iters, args.skip)
    log = lambda msg: print(f'# {msg}', flush=True)  # noqa: E731
    if args.work_dir:
        rows = chain(args.work_dir, iters, skip, args.gpus, args.smoke, log)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            rows = chain(tmp, iters, skip, args.gpus, args.smoke, log)
    return dict(chain=rows), md_chain(rows, args.smoke)


def run_gpu_check(args, argv: list[str]) -> dict:
    """The report of peco_mm.tooling.gpu_check, printed and written to --report."""
    from peco_mm.tooling.gpu_check import run_gpu_check as check
    from peco_mm.tooling.tool_runs import save_json
    res, lines = check(str(ROOT), args.device, args.tokenizer, args.batch, args.steps,
                       args.warmup, args.images, args.smoke, args.distributed_on_cpu,
                       log=lambda msg: print(f'# {msg}', flush=True))
    lines[1:1] = ['', f"`python tools/benchmark.py {' '.join(argv)}`"]
    text = '\n'.join(lines).rstrip() + '\n'
    Path(args.report).write_text(text)
    print(text + f'\n(written to {args.report})')
    res['command'] = ['tools/benchmark.py', *argv]
    save_json(args.out, res)
    if res['failed']:
        sys.exit(f"gpu-check: {len(res['failed'])} section(s) failed: "
                 f"{', '.join(f['section'] for f in res['failed'])} (see {args.report})")
    return res


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
    from peco_mm.tooling.bench_report import md_repeats
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
    timing = args.command not in ('memory', 'gpu-check', 'chain')
    if timing and (args.repeats > 1 or len(args.malloc) > 1):
        res = run_repeats(args, argv)
        if args.out:
            Path(args.out).write_text(json.dumps(res, indent=1, default=str))
        return res
    import torch

    import peco_mm  # noqa: F401  (registers peco_mm types)
    from peco_mm.tooling.tool_runs import save_json
    from peco_mm.supervisor.malloc import apply_cpu_malloc, resolve_mode
    if args.threads:
        torch.set_num_threads(args.threads)
    args.device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    cuda = args.device.startswith('cuda')
    malloc = resolve_mode(args.malloc[0], cuda)  # recorded with the results
    apply_cpu_malloc(malloc, cuda)
    if args.command == 'gpu-check':
        return run_gpu_check(args, argv)
    res, lines = dict(memory=run_memory, chain=run_chain).get(args.command, run_timing)(args)
    res.update(environment(args.device), malloc=malloc, command=['tools/benchmark.py', *argv])
    print(f"`python tools/benchmark.py {' '.join(argv)}`: {res['device']}, {res['threads']} "
          f"threads, torch {res['torch']}, malloc {malloc}\n")
    print('\n'.join(lines).rstrip())
    save_json(args.out, res)
    return res


if __name__ == '__main__':
    main()
