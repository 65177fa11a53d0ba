"""Time one MIM pretraining step (forward, backward, AdamW update) at the same batch for:

- PeCo (PeCoViT-B/16 + the PeCo tokenizer as target, K = 8192), tokenizer included;
- mmpretrain's BEiT (BEiTPretrainViT-B/16 + its DALL-E target generator);
- mmpretrain's MAE (ViT-B/16 encoder, 8-block 512-d decoder, pixel loss);
- PeCo_MAE (MAE's encoder-decoder predicting PeCo codes).

Target generators get random weights (speed does not depend on them). Inputs are random
tensors already on the device, so data loading is not measured.

    python tools/benchmark_pretrain.py --batch 64 --amp bf16          # GPU, ViT-B
    python tools/benchmark_pretrain.py --smoke                        # tiny models, CPU
    python tools/benchmark_pretrain.py --only peco beit --json out.json
"""
import argparse
import json
import os.path as osp
import statistics
import sys
import time

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))  # run from any folder

import torch  # noqa: E402

import peco_mm  # noqa: E402,F401  (registers peco_mm types)

MODELS_ORDER = ('peco', 'beit', 'mae', 'peco_mae')


def parse_args(argv=None):
    p = argparse.ArgumentParser(description='Benchmark one MIM pretraining step')
    p.add_argument('--batch', type=int, default=64, help='images per step')
    p.add_argument('--steps', type=int, default=10, help='timed steps (median reported)')
    p.add_argument('--warmup', type=int, default=3, help='untimed steps first')
    p.add_argument('--amp', choices=['none', 'bf16', 'fp16'], default='none')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--only', nargs='+', choices=MODELS_ORDER, default=list(MODELS_ORDER))
    p.add_argument('--smoke', action='store_true',
                   help='tiny models (width 64, depth 2, 32 px, K=16) for a quick CPU check')
    p.add_argument('--json', help='also write the results here')
    return p.parse_args(argv)


# ---- model configs ------------------------------------------------------------------------------
def sizes(smoke: bool) -> dict:
    if smoke:
        return dict(img=32, patch=8, k=16, masked=6, min_block=2,
                    vit=dict(embed_dims=64, num_layers=2, num_heads=4),
                    ffn=256, dec=dict(embed_dims=32, num_layers=1, num_heads=4),
                    tokenizer=dict(base_channels=16, channel_mult=(1, 2, 2, 4),
                                   embed_dims=16, num_embeddings=16),
                    dalle=dict(n_hid=16, vocab_size=16))
    return dict(img=224, patch=16, k=8192, masked=75, min_block=16,
                vit='base', ffn=3072, dec=dict(embed_dims=512, num_layers=8, num_heads=16),
                tokenizer=dict(), dalle=dict())


def mmpretrain_arch(s: dict):
    if isinstance(s['vit'], str):
        return s['vit']
    return dict(s['vit'], feedforward_channels=s['ffn'])


def build(name: str, s: dict) -> torch.nn.Module:
    from mmpretrain.registry import MODELS
    tokenizer = dict(type='PeCoTokenizer', with_decoder=False, frozen=True, **s['tokenizer'])
    peco_vit = dict(type='PeCoViT', arch=s['vit'], img_size=s['img'], patch_size=s['patch'])
    grid = s['img'] // s['patch']
    if name == 'peco':
        cfg = dict(type='PeCo', require_target_checkpoint=False,
                   backbone=dict(peco_vit, qkv_bias='qv', use_abs_pos_emb=False,
                                 rel_pos_bias='shared', layer_scale_init_value=0.1,
                                 drop_path_rate=0.1, use_mask_token=True),
                   head=dict(type='PeCoMIMHead'), target_generator=tokenizer)
    elif name == 'peco_mae':
        cfg = dict(type='PeCoMAE', require_target_checkpoint=False, backbone=peco_vit,
                   neck=dict(type='PeCoMAEDecoder', grid=grid, **s['dec']),
                   head=dict(type='PeCoMIMHead'), target_generator=tokenizer)
    elif name == 'beit':
        width = 768 if isinstance(s['vit'], str) else s['vit']['embed_dims']
        cfg = dict(type='BEiT',
                   backbone=dict(type='BEiTPretrainViT', arch=mmpretrain_arch(s),
                                 img_size=s['img'], patch_size=s['patch'], drop_path_rate=0.1,
                                 layer_scale_init_value=0.1),
                   head=dict(type='BEiTV1Head', embed_dims=width, num_embed=s['k'],
                             loss=dict(type='CrossEntropyLoss')),
                   target_generator=dict(type='DALL-E', **s['dalle']))
    elif name == 'mae':
        width = 768 if isinstance(s['vit'], str) else s['vit']['embed_dims']
        d = s['dec']
        cfg = dict(type='MAE',
                   backbone=dict(type='MAEViT', arch=mmpretrain_arch(s), img_size=s['img'],
                                 patch_size=s['patch'], mask_ratio=0.75),
                   neck=dict(type='MAEPretrainDecoder', num_patches=grid * grid,
                             patch_size=s['patch'], embed_dim=width,
                             decoder_embed_dim=d['embed_dims'], decoder_depth=d['num_layers'],
                             decoder_num_heads=d['num_heads']),
                   head=dict(type='MAEPretrainHead', norm_pix=True, patch_size=s['patch'],
                             loss=dict(type='PixelReconstructionLoss', criterion='L2')))
    else:
        raise ValueError(name)
    model = MODELS.build(cfg)
    model.init_weights()
    return model


# ---- one step -----------------------------------------------------------------------------------
def make_batch(name: str, s: dict, batch: int, device: str):
    from mmpretrain.structures import DataSample

    from peco_mm.datasets.mim_transforms import BlockwiseMaskGenerator
    img = torch.randn(batch, 3, s['img'], s['img'], device=device)
    grid = s['img'] // s['patch']
    if name == 'beit':  # DALL-E is 8x down: a 112 px view for the 14x14 grid, as BEiT
        target = torch.rand(batch, 3, grid * 8, grid * 8, device=device)
    else:
        target = torch.rand(batch, 3, s['img'], s['img'], device=device) * 2 - 1
    masker = BlockwiseMaskGenerator(grid, s['masked'], s['min_block'])
    samples = [DataSample().set_mask(torch.from_numpy(masker.generate()).to(device))
               for _ in range(batch)]
    if name == 'mae':  # mmpretrain's MAE takes one tensor and no masks
        return img, samples
    return [img, target], samples


def time_model(name: str, args, s: dict) -> dict:
    torch.manual_seed(0)
    model = build(name, s).to(args.device).train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    inputs, samples = make_batch(name, s, args.batch, args.device)
    cuda = args.device.startswith('cuda')
    dtype = {'bf16': torch.bfloat16, 'fp16': torch.float16}.get(args.amp)
    scaler = torch.amp.GradScaler('cuda') if args.amp == 'fp16' else None

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type='cuda' if cuda else 'cpu', dtype=dtype,
                            enabled=dtype is not None):
            losses = model.loss(inputs, samples)
            loss = sum(v for k, v in losses.items() if 'loss' in k)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    times = []
    for i in range(args.warmup + args.steps):
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - t)
    ms = statistics.median(times) * 1000
    target = getattr(model, 'target_generator', None)
    res = dict(model=name, ms_per_step=round(ms, 2), img_per_s=round(args.batch / ms * 1000, 1),
               trainable_m=round(sum(p.numel() for p in params) / 1e6, 2),
               target_generator_m=round(sum(p.numel() for p in target.parameters()) / 1e6, 2)
               if target is not None else 0.0)
    if cuda:
        res['peak_mem_gib'] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        torch.cuda.reset_peak_memory_stats()
    return res


def main(argv=None):
    args = parse_args(argv)
    s = sizes(args.smoke)
    if args.smoke:
        args.batch = min(args.batch, 4)
        args.steps, args.warmup = min(args.steps, 2), min(args.warmup, 1)
    results = [time_model(n, args, s) for n in MODELS_ORDER if n in args.only]
    ref = next((r['ms_per_step'] for r in results if r['model'] == 'beit'), None)
    device = torch.cuda.get_device_name() if args.device.startswith('cuda') else 'CPU'
    print(f'\n{"smoke" if args.smoke else "ViT-B/16"}, batch {args.batch}, amp {args.amp}, '
          f'{device}, median of {args.steps} steps (fwd + bwd + AdamW)')
    print('| model | ms/step | img/s | vs BEiT | trainable M | target gen. M |')
    print('|---|---:|---:|---:|---:|---:|')
    for r in results:
        ratio = f'{r["ms_per_step"] / ref:.2f}' if ref else '-'
        print(f'| {r["model"]} | {r["ms_per_step"]} | {r["img_per_s"]} | {ratio} | '
              f'{r["trainable_m"]} | {r["target_generator_m"]} |')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(dict(device=device, batch=args.batch, amp=args.amp, smoke=args.smoke,
                           results=results), f, indent=1)
    return results


if __name__ == '__main__':
    main()
