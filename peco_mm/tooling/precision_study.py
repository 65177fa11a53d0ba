"""Does the tokenizer learn the same in bf16 as in fp32? (tools/tokenizer_bf16.py)

Each replicate r draws the study's shape world with seed r (`shape_world.make_world`, smaller
than the study's profiles), writes a randomly initialised toy ViT (seed r) as the perceptual
network, and trains the study's tokenizer (configs/study/tokenizer_world.py) twice with seed
r: once in fp32 and once with `model.train_bf16=True`, the same world, data order and initial
weights. Both are scored as the study scores its tokenizers, on the world's held-out classes B
(test half): PSNR, codeword probe, codebook usage (`TokenizerMetric`) and code agreement of the
geometry-matched pairs (`study_stages.pair_agreement`'s measure). The paired differences
(bf16 minus fp32) get the study's t intervals (`paired_stats.t_interval`), and each is judged
against a margin stated before the runs (`MARGINS`): the same when the interval holds 0 and
lies inside plus or minus the margin.

The perceptual network is the study's control network (random initialisation) rather than a
trained one: training one per replicate costs more than both tokenizers, and what is compared
is the arithmetic of the step (the perceptual network's forward and backward included), which
a random network exercises as much.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .study_profiles import CONFIG_ROOT
from .study_runs import CONFIGS, set_schedule
from .tool_runs import plain_number

# margin per metric, fixed before any run: about a third of the smallest difference
# between two tokenizers that the study's report draws a conclusion from (docs/reproduce.md,
# Table 4: PSNR 0.53 dB, codeword probe 15.8 points, matched-pair agreement 4.4 points), and
# 5 points of codebook usage (every study tokenizer uses 99.2-100 % of its codes)
MARGINS = {'psnr': 0.2, 'codeword_probe_acc': 5.0, 'agreement/matched': 1.5, 'usage': 5.0}
WORLD = dict(n_pretrain=1000, per_class=2, val_per_class=20, judge_per_class=2, n_pairs=100,
             held_out=5, rotate=False)
PRECISIONS = ('fp32', 'bf16')


def write_random_perceptual(path: Path, seed: int) -> str:
    """The study's toy ViT (width 64, 4 blocks, 4 heads, 32 px, 4 px patches) at random
    initialisation with `seed`, written as a converted PeCoViT file."""
    import torch

    from ..models.vit import PeCoViT
    if not path.is_file():
        args = dict(arch=dict(embed_dims=64, num_layers=4, num_heads=4), img_size=32,
                    patch_size=4)
        torch.manual_seed(seed)
        net = PeCoViT(**args)
        net.init_weights()
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({'state_dict': net.state_dict(),
                    'meta': dict(pecovit_args=args, source=f'random initialisation, seed {seed}')},
                   path)
    return str(path)


def tokenizer_config(rep_dir: Path, seed: int, iters: int, batch: int, precision: str,
                     perceptual: str):
    """configs/study/tokenizer_world.py under `rep_dir`: seed, `iters` iterations of `batch`
    images, the precision, the random perceptual network, no judge (none is needed)."""
    from mmengine.config import Config

    from .tool_runs import move_root
    cfg = Config.fromfile(str(CONFIGS / 'tokenizer_world.py'))
    move_root(cfg, CONFIG_ROOT, str(rep_dir))
    cfg.randomness = dict(cfg.get('randomness', {}), seed=seed)
    set_schedule(cfg, iters)
    cfg.merge_from_dict({'model.train_bf16': precision == 'bf16',
                         'model.perceptual.checkpoint': perceptual,
                         'test_evaluator.classifier': None,
                         'train_dataloader.batch_size': batch,
                         'work_dir': str(rep_dir / f'tokenizer_{precision}')})
    return cfg


def train_and_score(cfg, pairs: Path) -> dict:
    """Train one tokenizer run, test it on B's test half and measure its pair agreement."""
    from mmengine.runner import Runner

    from .code_agreement import pair_agreement
    from .images import find_images, load_images
    t = time.time()
    runner = Runner.from_cfg(cfg)
    runner.train()
    seconds = time.time() - t
    metrics = {k.split('/')[-1]: v for k, v in runner.test().items()}  # tokenizer/psnr: psnr
    a, b = (load_images(find_images(pairs / side)) for side in 'ab')
    metrics['agreement/matched'] = 100 * pair_agreement(runner.model.eval(), a, b)
    metrics['usage'] = 100 * metrics['usage']
    return dict(metrics={k: metrics[k] for k in ('psnr', 'ssim', 'codeword_probe_acc',
                                                 'usage', 'agreement/matched')},
                train_seconds=round(seconds, 1))


def run_replicate(work_dir: Path, r: int, iters: int, batch: int) -> dict:
    """Replicate r: its world, perceptual network and both tokenizers (kept when written)."""
    from ..utils.quiet import quiet_logs
    from .shape_world import make_world
    rep = work_dir / f'rep{r}'
    out = rep / 'result.json'
    if out.is_file() and json.loads(out.read_text()).get('iters') == [iters, batch]:
        return json.loads(out.read_text())
    if not (rep / 'world' / 'classes.json').is_file():
        make_world(rep / 'world', seed=r, **WORLD)
    perceptual = write_random_perceptual(rep / 'perceptual_random.pth', seed=r)
    res = dict(replicate=r, iters=[iters, batch], seed=r)
    for precision in PRECISIONS:
        cfg = tokenizer_config(rep, r, iters, batch, precision, perceptual)
        with quiet_logs():
            res[precision] = train_and_score(cfg, rep / 'world' / 'pairs')
        print(f'rep{r} {precision}: {res[precision]}', flush=True)
    out.write_text(json.dumps(res, indent=1, default=plain_number))
    return res


def compare(results: list[dict]) -> dict:
    """Per metric: the replicates' fp32 and bf16 values, the paired bf16 - fp32 interval,
    the margin and the verdict ('same' when the interval holds 0 and lies within the
    margin; else 'differs' when it excludes 0, 'undecided' when it is wider than the
    margin)."""
    from .paired_stats import t_interval
    rows = {}
    for key, margin in MARGINS.items():
        fp32 = [r['fp32']['metrics'][key] for r in results]
        bf16 = [r['bf16']['metrics'][key] for r in results]
        iv = t_interval([b - f for b, f in zip(bf16, fp32)])
        holds_zero = iv.low <= 0 <= iv.high
        verdict = ('same' if holds_zero and -margin <= iv.low and iv.high <= margin
                   else 'undecided' if holds_zero else 'differs')
        rows[key] = dict(fp32=fp32, bf16=bf16, mean_diff=iv.mean, ci95=[iv.low, iv.high],
                         p=iv.p, margin=margin, verdict=verdict)
    return rows


def run_comparison(work_dir: str, replicates: int, iters: int, batch: int, out: str | None
                   ) -> dict:
    """Every replicate (skipping those written before), the comparison, the JSON."""
    from ..utils.precision import cpu_has_native_bf16
    wd = Path(work_dir).resolve()
    t = time.time()
    results = [run_replicate(wd, r, iters, batch) for r in range(replicates)]
    summary = dict(replicates=replicates, iters=iters, batch=batch, world=WORLD,
                   cpu_native_bf16=cpu_has_native_bf16(), threads=os.cpu_count(),
                   load=os.getloadavg(), seconds=round(time.time() - t, 1),
                   comparison=compare(results),
                   train_seconds={p: [r[p]['train_seconds'] for r in results]
                                  for p in PRECISIONS})
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(summary, indent=1, default=plain_number) + '\n')
    return summary


LABELS = {'psnr': ('PSNR (dB)', 2), 'codeword_probe_acc': ('codeword probe (%)', 1),
          'agreement/matched': ('code agreement, matched pairs (%)', 1),
          'usage': ('codebook usage (%)', 1)}


def md_comparison(summary: dict) -> list[str]:
    """The Markdown table: per metric the fp32 and bf16 means, the paired difference with its
    95 % interval, the margin and the verdict."""
    out = ['| metric | fp32 (mean) | bf16 (mean) | bf16 - fp32, per replicate | mean [95 % CI] '
           '| margin | verdict |', '|---|---:|---:|---|---|---:|---|']
    for key, row in summary['comparison'].items():
        label, d = LABELS[key]
        diffs = ', '.join(f'{b - f:+.{d}f}' for f, b in zip(row['fp32'], row['bf16']))
        lo, hi = row['ci95']
        out.append(f"| {label} | {sum(row['fp32']) / len(row['fp32']):.{d}f} | "
                   f"{sum(row['bf16']) / len(row['bf16']):.{d}f} | {diffs} | "
                   f"{row['mean_diff']:+.{d + 1}f} [{lo:+.{d + 1}f}, {hi:+.{d + 1}f}] | "
                   f"± {row['margin']:g} | {row['verdict']} |")
    return out
