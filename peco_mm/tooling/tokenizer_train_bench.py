"""The tokenizer's full training step (tools/benchmark.py tokenizer-train): encoder, EMA
quantizer, decoder, pixel + perceptual (+ adversarial) losses, backward and the config's Adam
update, at a shipped config's model and per-GPU batch, in fp32 and in bf16 (`train_bf16`).

The model is the config's own (configs/peco/tokenizer_vqvae_in1k.py and its adversarial
variant), with random weights: the perceptual network (MoCo v3 ViT-B in the config) is built
at random initialisation with the config's architecture and layers, and the adversarial loss
is counted from the first step (the config starts it at iteration 5000; the step costs the same
either way, the discriminator runs before then too). Inputs are random images in [-1, 1] on
the device (the data loader is not measured). FLOPs are counted as `benchmark.py pretrain`
counts them: torch's FLOP counter on a one-image step, times the batch. MFU: on CUDA against
the card's dense bf16 peak (`gpu_check.CARD_PEAKS`), on a CPU against its measured GEMM rate
of the row's precision.

Smoke sizes: the same architecture at 16 base channels, 3 downsamples, K = 16, D = 16, 32 px,
a 1-block ViT perceptual network and a 1-layer discriminator.
"""
from __future__ import annotations

import resource
import statistics
from pathlib import Path

import torch

from .timing import time_steps

CONFIGS = dict(default='configs/peco/tokenizer_vqvae_in1k.py',
               adversarial='configs/peco/tokenizer_vqvae_adv_in1k.py')
SMOKE_PARTS = dict(base_channels=16, channel_mult=(1, 2, 2, 4), num_res_blocks=1)
GiB = 2**30
ROOT = Path(__file__).resolve().parents[2]


def tokenizer_train_model(config: str, smoke: bool) -> tuple[torch.nn.Module, dict, int, int]:
    """(the config's PeCoTokenizer with a random perceptual network, its optimizer config, its
    per-GPU batch, its image size); smoke: `SMOKE_PARTS` at 32 px."""
    from ..registry import MODELS
    from .config_step import load_config
    cfg = load_config(config)
    model = dict(cfg.model)
    model['perceptual'] = dict(model['perceptual'], checkpoint=None, allow_random=True)
    if model.get('adversarial_weight', 0) > 0:
        model['adversarial_start_iter'] = 0
    size = int(cfg.get('img_size', 224))
    if smoke:
        size = 32
        for part in ('encoder', 'decoder'):
            model[part] = dict(model[part], **SMOKE_PARTS)
        model['quantizer'] = dict(model['quantizer'], num_embeddings=16, embed_dims=16)
        model['perceptual'] = dict(model['perceptual'], layers=(1, ), vit_cfg=dict(
            arch=dict(embed_dims=32, num_layers=1, num_heads=2), img_size=32, patch_size=8))
        if 'discriminator' in model:
            model['discriminator'] = dict(model['discriminator'], base_channels=8, num_layers=1)
    torch.manual_seed(0)
    built = MODELS.build(model)
    return built, dict(cfg.optim_wrapper.optimizer), int(cfg.train_dataloader.batch_size), size


def make_optimizer(model: torch.nn.Module, optimizer: dict) -> torch.optim.Optimizer:
    """The config's optimizer (Adam, betas (0.5, 0.95)) over the trainable parameters."""
    kw = {k: v for k, v in optimizer.items() if k != 'type'}
    cls = getattr(torch.optim, optimizer.get('type', 'Adam'))
    return cls([p for p in model.parameters() if p.requires_grad], **kw)


def peak_memory_gib(device: str) -> tuple[str, float]:
    """('peak_mem_gib', CUDA's peak allocation) or ('peak_rss_gib', the process's peak
    resident memory on a CPU: everything the process held, not the step alone)."""
    if device.startswith('cuda'):
        return 'peak_mem_gib', torch.cuda.max_memory_allocated(device) / GiB
    return 'peak_rss_gib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GiB


def time_tokenizer_train(name: str, config: str, precision: str, batch: int | None,
                         steps: int, warmup: int, device: str, smoke: bool,
                         peak_tflops: float | None, gemm: dict) -> dict:
    """One row: ms per step (median of `steps` after `warmup`), img/s, GFLOPs per step,
    achieved TFLOP/s, MFU and peak memory."""
    from .benchmark import count_gflops
    model, optimizer, config_batch, size = tokenizer_train_model(config, smoke)
    batch = batch or config_batch
    model.train_bf16 = precision == 'bf16'
    model.to(device).train()
    opt = make_optimizer(model, optimizer)
    g = torch.Generator().manual_seed(0)
    img = (torch.rand(batch, 3, size, size, generator=g) * 2 - 1).to(device)

    def step(x=img):
        opt.zero_grad(set_to_none=True)
        losses = model.loss(x)
        loss = sum(v for k, v in losses.items() if k.startswith('loss'))
        loss.backward()
        opt.step()
        return loss

    step(img[:2])  # the codebook's data init, outside the timed and counted steps
    if device.startswith('cuda'):
        torch.cuda.reset_peak_memory_stats(device)
    sec = statistics.median(time_steps(step, steps, warmup, device))
    gflops = count_gflops(lambda: step(img[:1])) * batch
    mem_key, mem = peak_memory_gib(device)
    tflops = gflops / sec / 1e3
    reference = peak_tflops if peak_tflops else (gemm.get(precision) or 0) / 1e3
    row = {'model': f'{name} [{precision}]', 'variant': name, 'precision': precision,
           'img_size': size, 'batch': batch, 'ms_per_step': round(1000 * sec, 2),
           'img_per_s': round(batch / sec, 2), 'gflops_per_step': round(gflops, 3),
           'gflop_per_s': round(gflops / sec, 1), 'tflop_per_s': round(tflops, 4),
           'mfu': round(tflops / reference, 4) if reference else None,
           'mfu_of': 'card bf16 peak' if peak_tflops else f'{precision} GEMM',
           mem_key: round(mem, 3)}
    if not peak_tflops and gemm.get(precision):
        row['of_gemm'] = gemm[precision]  # what md_repeats compares GFLOP/s with
    return row


def bench_tokenizer_train(variants: list[str], precisions: list[str], batch: int | None,
                          steps: int, warmup: int, device: str, smoke: bool = False,
                          gemm: dict | None = None) -> list[dict]:
    """A row per (variant, precision); `batch` None: the config's per-GPU batch."""
    from .gpu_check import card_peak
    unknown = sorted(set(variants) - set(CONFIGS)) + sorted(set(precisions) - {'fp32', 'bf16'})
    if unknown:
        raise ValueError(f'tokenizer-train: unknown {unknown}; variants: {sorted(CONFIGS)}, '
                         "precisions: ['bf16', 'fp32']")
    peak = None
    if device.startswith('cuda'):
        found = card_peak(torch.cuda.get_device_name(device))
        peak = found[1] if found else None
    return [time_tokenizer_train(v, str(ROOT / CONFIGS[v]), p, batch, steps, warmup, device,
                                 smoke, peak, gemm or {})
            for v in variants for p in precisions]


def md_tokenizer_train(rows: list[dict]) -> list[str]:
    """The Markdown table of the rows, bf16 against fp32 per variant."""
    fp32 = {r['variant']: r['img_per_s'] for r in rows if r['precision'] == 'fp32'}
    out = ['| tokenizer training step | precision | batch | ms/step | img/s | vs fp32 | '
           'GFLOPs / step | TFLOP/s | MFU | peak memory |',
           '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|']
    for r in rows:
        ratio = (f"{r['img_per_s'] / fp32[r['variant']]:.2f}x" if r['variant'] in fp32
                 else '-')
        mfu = f"{100 * r['mfu']:.1f} % of {r['mfu_of']}" if r['mfu'] is not None else '-'
        mem = (f"{r['peak_mem_gib']} GiB" if 'peak_mem_gib' in r
               else f"{r['peak_rss_gib']} GiB RSS")
        out.append(f"| {r['model']} | {r['precision']} | {r['batch']} | {r['ms_per_step']} | "
                   f"{r['img_per_s']} | {ratio} | {r['gflops_per_step']} | "
                   f"{r['tflop_per_s']} | {mfu} | {mem} |")
    return out
