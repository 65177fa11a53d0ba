"""What tools/benchmark.py measures: tokenizer encode throughput, MIM pretraining steps of PeCo
against mmpretrain's BEiT and MAE, training steps of any config (the dense configs), and the
peak memory of a config's training step over batch size. The last two live in `config_step`
and the timing helpers in `timing`; this module names them all, as tools/benchmark.py uses them.

Weights are random everywhere (speed and memory do not depend on them) and inputs are
synthetic, made on the host: a config's step runs the config's own train pipeline (minus the
file loading) on a random 640x480 photo with random labels, collates it like the config's
dataloader, and calls the model's `train_step` with the config's optimizer wrapper, so the
data preprocessor, the loss and the optimizer update (layer decay included) are all measured.
"""
from __future__ import annotations

import contextlib
import statistics
from functools import partial
from typing import Callable, Sequence

import torch

from ..layers.quantizer import CODEBOOK_SIZE
from ..utils.quiet import quiet_logs
from .config_step import (bench_config_steps, bench_pipelines, build_model, config_amp,
                          is_loading_step, load_config, num_classes_of, peak_step_memory,
                          plan_memory, random_weights, synthetic_batch)
from .timing import autocast, gemm_gflops, time_steps

GiB = 2**30

__all__ = ['bench_config_steps', 'bench_pipelines', 'bench_pretrain', 'bench_tokenizers',
           'build_model', 'build_pretrain_model', 'config_amp', 'count_gflops', 'gemm_gflops',
           'is_loading_step', 'load_config', 'num_classes_of', 'peak_step_memory',
           'plan_memory', 'pretrain_inputs', 'pretrain_sizes', 'quiet_logs', 'random_weights',
           'synthetic_batch', 'time_steps', 'tokenizer_models', 'PRETRAIN_MODELS']


# ---- 1. tokenizer encode ---------------------------------------------------------------------
class DalleCodes(torch.nn.Module):
    """mmpretrain's DALL-E encoder (BEiT's tokenizer) with `encode(img) -> (B, h, w) codes`."""

    def __init__(self, **kwargs) -> None:
        super().__init__()
        from mmpretrain.models.selfsup.cae import DALLEEncoder
        self.encoder = DALLEEncoder(**kwargs).eval()

    @torch.inference_mode()
    def encode(self, x: torch.Tensor, bf16: bool | None = None) -> torch.Tensor:
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bool(bf16)):
            return self.encoder(x).argmax(1)


def tokenizer_models(dalle: bool = True, smoke: bool = False) -> list[tuple[str, int, object]]:
    """(name, input size, module with .encode) rows. Smoke: a quarter of the channels at 64 px."""
    from ..tokenizer import PeCoTokenizer, cnn_parts
    common = dict(with_decoder=False, frozen=True, perceptual_weight=0.0)
    base, lite = (16, 8) if smoke else (64, 32)
    size = 64 if smoke else 224
    rows = [('PeCo (default, 37.5M)', size, PeCoTokenizer(**cnn_parts(base), **common)),
            ('PeCo lite (25.7M)', size,
             PeCoTokenizer(**cnn_parts(lite, (1, 2, 4, 8, 16)), **common)),
            ('PeCo default, no channels-last', size,
             PeCoTokenizer(**cnn_parts(base), channels_last=False, **common))]
    if dalle:  # 8x down: half the input size for the same code grid, as BEiT feeds it
        rows.append(('DALL-E encoder (BEiT, mmpretrain)', size // 2,
                     DalleCodes(n_hid=64 if smoke else 256)))
    return rows


def count_gflops(fn: Callable[[], object]) -> float:
    """GFLOPs (multiply-add = 2) of one call of `fn`, forward and any backward it runs, from
    torch's FLOP counter."""
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops() / 1e9


def bench_tokenizers(batch: int, steps: int, warmup: int, device: str, dalle: bool = True,
                     smoke: bool = False, bf16: bool | None = None) -> list[dict]:
    """Encode throughput; `bf16`: the encoders in bf16 autocast (True), fp32 (False), or each
    tokenizer's default (None: PeCo's `encode_bf16`, off unless set)."""
    rows = []
    for name, size, module in tokenizer_models(dalle, smoke):
        module.to(device)
        x = torch.rand(batch, 3, size, size, device=device) * 2 - 1
        sec = statistics.median(time_steps(lambda: module.encode(x, bf16=bf16), steps, warmup,
                                           device))
        gflops = count_gflops(lambda: module.encode(x[:1]))  # per image
        rows.append(dict(model=name, img_size=size, batch=batch, gflops=round(gflops, 4),
                         ms_per_batch=round(1000 * sec, 2), img_per_s=round(batch / sec, 2),
                         gflop_per_s=round(gflops * batch / sec, 1)))
    return rows


# ---- 2. pretraining step: PeCo, BEiT, MAE, PeCo_MAE --------------------------------------------
PRETRAIN_MODELS = ('peco', 'beit', 'mae', 'peco_mae')


def pretrain_sizes(smoke: bool) -> dict:
    from ..tokenizer import cnn_parts
    if smoke:
        return dict(img=32, patch=8, k=16, masked=6, min_block=2,
                    vit=dict(embed_dims=64, num_layers=2, num_heads=4), ffn=256,
                    dec=dict(embed_dims=32, num_layers=1, num_heads=4),
                    tokenizer=cnn_parts(16, (1, 2, 2, 4), embed_dims=16, num_embeddings=16),
                    dalle=dict(n_hid=16, vocab_size=16))
    return dict(img=224, patch=16, k=CODEBOOK_SIZE, masked=75, min_block=16, vit='base',
                ffn=3072,
                dec=dict(embed_dims=512, num_layers=8, num_heads=16), tokenizer=dict(),
                dalle=dict())


def build_pretrain_model(name: str, s: dict) -> torch.nn.Module:
    """PeCo / PeCo_MAE (this package) and BEiT / MAE (mmpretrain) at the same ViT size."""
    from mmpretrain.registry import MODELS
    arch = s['vit'] if isinstance(s['vit'], str) else dict(s['vit'], feedforward_channels=s['ffn'])
    width = 768 if isinstance(s['vit'], str) else s['vit']['embed_dims']
    grid = s['img'] // s['patch']
    tokenizer = dict(type='PeCoTokenizer', with_decoder=False, frozen=True, **s['tokenizer'])
    peco_vit = dict(type='PeCoViT', arch=s['vit'], img_size=s['img'], patch_size=s['patch'])
    d = s['dec']
    cfgs = dict(
        peco=dict(type='PeCo', require_target_checkpoint=False,
                  backbone=dict(peco_vit, qkv_bias='qv', use_abs_pos_emb=False,
                                rel_pos_bias='shared', layer_scale_init_value=0.1,
                                drop_path_rate=0.1, use_mask_token=True),
                  head=dict(type='PeCoMIMHead'), target_generator=tokenizer),
        peco_mae=dict(type='PeCoMAE', require_target_checkpoint=False, backbone=peco_vit,
                      neck=dict(type='PeCoMAEDecoder', grid=grid, **d),
                      head=dict(type='PeCoMIMHead'), target_generator=tokenizer),
        beit=dict(type='BEiT',
                  backbone=dict(type='BEiTPretrainViT', arch=arch, img_size=s['img'],
                                patch_size=s['patch'], drop_path_rate=0.1,
                                layer_scale_init_value=0.1),
                  head=dict(type='BEiTV1Head', embed_dims=width, num_embed=s['k'],
                            loss=dict(type='CrossEntropyLoss')),
                  target_generator=dict(type='DALL-E', **s['dalle'])),
        mae=dict(type='MAE',
                 backbone=dict(type='MAEViT', arch=arch, img_size=s['img'],
                               patch_size=s['patch'], mask_ratio=0.75),
                 neck=dict(type='MAEPretrainDecoder', num_patches=grid * grid,
                           patch_size=s['patch'], embed_dim=width,
                           decoder_embed_dim=d['embed_dims'], decoder_depth=d['num_layers'],
                           decoder_num_heads=d['num_heads']),
                 head=dict(type='MAEPretrainHead', norm_pix=True, patch_size=s['patch'],
                           loss=dict(type='PixelReconstructionLoss', criterion='L2'))))
    if name not in cfgs:
        raise ValueError(f'pretraining model {name!r}; allowed: {PRETRAIN_MODELS}')
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmpretrain'):  # whatever scope a caller left
        model = MODELS.build(cfgs[name])
    model.init_weights()
    return model


def pretrain_inputs(name: str, s: dict, batch: int, device: str):
    """(inputs, data samples) as each model's `loss` takes them: two views and the masks of
    the model's generator (block-wise for PeCo and BEiT, a 112 px view for DALL-E's 8x grid;
    MAE's random 75 % for PeCo_MAE), one view (MAE, which masks inside its backbone)."""
    from mmpretrain.structures import DataSample

    from ..registry import TRANSFORMS
    img = torch.randn(batch, 3, s['img'], s['img'], device=device)
    grid = s['img'] // s['patch']
    side = grid * 8 if name == 'beit' else s['img']
    target = torch.rand(batch, 3, side, side, device=device) * 2 - 1
    masker = TRANSFORMS.build(
        dict(type='RandomMaskGenerator', input_size=grid, mask_ratio=0.75)
        if name == 'peco_mae' else
        dict(type='BlockwiseMaskGenerator', input_size=grid, num_masking_patches=s['masked'],
             min_num_patches=s['min_block']))
    samples = [DataSample().set_mask(torch.from_numpy(masker.generate()).to(device))
               for _ in range(batch)]
    return (img if name == 'mae' else [img, target]), samples


def bench_pretrain(models: Sequence[str], batch: int, steps: int, warmup: int, device: str,
                   amp: str = 'none', smoke: bool = False, target_bf16: bool = False,
                   target_layout: bool | str = 'auto', target_compile: bool | str = 'auto',
                   target_chunk: int = 0, sdpa: str = 'default', fused_adamw: bool = False,
                   compile_step: bool = False) -> list[dict]:
    """One step = forward, backward and AdamW update; median ms over `steps`. The levers, each
    off (or as shipped) by default and tagged on the row when set (`levers`):
    PeCo's frozen target encoder (BEiT's DALL-E encoder follows the step's autocast anyway):
    `target_bf16` bf16 autocast instead of its default (fp32 on a CPU); `target_layout` its
    `channels_last` (True, False, 'auto': the frozen target's default by device);
    `target_compile` its `compile_encoder` (compiled in the warm-up steps: give warmup >= 2);
    `target_chunk` encode N images at a time (0: the whole batch). The step: `sdpa` the
    attention kernel (`sdpa_kernel`); `fused_adamw` AdamW's fused kernel (else foreach);
    `compile_step` the model's forward and loss through torch.compile, as mmengine's
    `compile=True` does for train_step."""
    if sdpa not in SDPA_BACKENDS:
        raise ValueError(f'sdpa={sdpa!r}; expected one of {SDPA_BACKENDS}')
    if target_chunk < 0:
        raise ValueError(f'target_chunk={target_chunk}; expected 0 (whole batch) or more')
    s = pretrain_sizes(smoke)
    levers = dict(target_bf16=target_bf16, target_layout=target_layout,
                  target_compile=target_compile, target_chunk=target_chunk, sdpa=sdpa,
                  fused_adamw=fused_adamw, compile_step=compile_step)
    return [time_pretrain_step(name, s, batch, steps, warmup, device, amp, **levers)
            for name in models]


SDPA_BACKENDS = ('default', 'flash', 'efficient', 'cudnn', 'math')


def sdpa_context(backend: str):
    """The attention kernels F.scaled_dot_product_attention may use: all (default) or one."""
    if backend == 'default':
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel({'flash': SDPBackend.FLASH_ATTENTION,
                        'efficient': SDPBackend.EFFICIENT_ATTENTION,
                        'cudnn': SDPBackend.CUDNN_ATTENTION, 'math': SDPBackend.MATH}[backend])


def chunked(encode: Callable, chunk: int) -> Callable:
    """`encode` on at most `chunk` images at a time, the codes concatenated (0: unchanged)."""
    if not chunk:
        return encode
    return lambda img, **kw: torch.cat([encode(part, **kw) for part in img.split(chunk)])


def set_target_levers(target, target_bf16: bool, target_layout: bool | str,
                      target_compile: bool | str, target_chunk: int) -> str:
    """PeCo's frozen target with the levers set; the row's tags for the ones not as shipped."""
    from ..tokenizer.encoding import check_setting
    target.channels_last = check_setting('channels_last', target_layout)
    target.compile_encoder = check_setting('compile_encoder', target_compile)
    target.encode = chunked(partial(target.encode, bf16=target_bf16), target_chunk)
    layout = {True: 'channels-last', False: 'contiguous'}.get(target_layout)
    compiled = {True: 'compiled', False: 'eager'}.get(target_compile)
    return ''.join(f' ({t} target)' for t in (
        'bf16' if target_bf16 else None, layout, compiled,
        f'chunk {target_chunk}' if target_chunk else None) if t)


def time_pretrain_step(name: str, s: dict, batch: int, steps: int, warmup: int, device: str,
                       amp: str, target_bf16: bool = False, target_layout: bool | str = 'auto',
                       target_compile: bool | str = 'auto', target_chunk: int = 0,
                       sdpa: str = 'default', fused_adamw: bool = False,
                       compile_step: bool = False) -> dict:
    torch.manual_seed(0)
    model = build_pretrain_model(name, s).to(device).train()
    target = getattr(model, 'target_generator', None)
    tags = ''
    if name in ('peco', 'peco_mae'):  # PeCo's tokenizer as target: fp32 unless asked
        tags = set_target_levers(target, target_bf16, target_layout, target_compile,
                                 target_chunk)
    tags += ''.join(f' ({t})' for t, on in ((f'sdpa {sdpa}', sdpa != 'default'),
                                            ('fused AdamW', fused_adamw),
                                            ('compiled step', compile_step)) if on)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, **({'fused': True} if fused_adamw else {}))
    loss_fn = torch.compile(model.loss) if compile_step else model.loss
    inputs, samples = pretrain_inputs(name, s, batch, device)
    scaler = torch.amp.GradScaler('cuda') if amp == 'fp16' else None

    def step(inputs=inputs, samples=samples, loss_fn=loss_fn):
        opt.zero_grad(set_to_none=True)
        with autocast(device, amp), sdpa_context(sdpa):
            losses = loss_fn(inputs, samples)
            loss = sum(v for k, v in losses.items() if 'loss' in k)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss

    if device.startswith('cuda'):
        torch.cuda.reset_peak_memory_stats()
    ms = statistics.median(time_steps(step, steps, warmup, device)) * 1000
    # counted on one image and scaled: a step's FLOPs are linear in the batch (tested)
    gflops = count_gflops(lambda: step(*pretrain_inputs(name, s, 1, device),
                                       loss_fn=model.loss)) * batch
    row = dict(model=name + tags,
               ms_per_step=round(ms, 2),
               img_per_s=round(batch / ms * 1000, 2),
               gflops_per_step=round(gflops, 3), gflop_per_s=round(gflops / ms * 1000, 1),
               trainable_m=round(sum(p.numel() for p in params) / 1e6, 2),
               target_generator_m=round(sum(p.numel() for p in target.parameters()) / 1e6, 2)
               if target is not None else 0.0)
    if device.startswith('cuda'):
        row['peak_mem_gib'] = round(torch.cuda.max_memory_allocated() / GiB, 2)
    return row
