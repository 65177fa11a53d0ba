"""What `tools/benchmark.py gpu-check` runs: one pass over what a GPU machine must get right,
written as one Markdown report.

1. mmcv ops: the torchvision-backed `nms`, `batched_nms` and RoIAlign (forward and backward)
   on the device against their CPU results.
2. bf16 code agreement of a tokenizer (a checkpoint, or the paper's architecture with random
   weights): `encode` in bf16 autocast against fp32.
3. Throughput and model FLOP utilisation (MFU) in bf16 of the tokenizer's encode and of the
   ViT-B PeCo pretraining step at batch 64, against the card's dense bf16 peak (`CARD_PEAKS`).
4. Peak memory of ViT-B / ViT-L pretraining at the paper's batch per GPU (2048 / 8 = 256), with
   and without gradient checkpointing (`with_cp`).
5. One DDP and one FSDP step on two processes (two GPUs, NCCL) with the ranks' weights
   compared afterwards.

Every section takes its device as an argument, so each also runs on the CPU (the tests run them
at toy sizes); the command runs on the CPU only what means something there (2, and 5 over gloo
when asked) and lists the rest as skipped.
"""
from __future__ import annotations

import os
import re
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

# Dense bf16 tensor-core peaks (TFLOP/s, no sparsity) from the vendors' datasheets. The first
# pattern that matches torch.cuda.get_device_name() wins, so the specific names come first.
CARD_PEAKS: list[tuple[str, str, float]] = [
    (r'H200', 'H200', 989.0),
    (r'H100.*PCIe', 'H100 PCIe', 756.0),
    (r'H100.*NVL', 'H100 NVL', 835.0),
    (r'H100', 'H100 SXM', 989.0),
    (r'A100', 'A100', 312.0),
    (r'L40S', 'L40S', 362.0),
    (r'L40\b', 'L40', 181.0),
    (r'\bL4\b', 'L4', 121.0),
    (r'RTX 4090', 'RTX 4090', 165.0),
    (r'RTX 6000 Ada', 'RTX 6000 Ada', 364.0),
    (r'RTX A6000', 'RTX A6000', 155.0),
    (r'\bA10\b', 'A10', 125.0),
    (r'RTX 3090', 'RTX 3090', 71.0),
]


def card_peak(name: str) -> tuple[str, float] | None:
    """(card, dense bf16 TFLOP/s) for a device name, None for a card not in the table."""
    for pattern, card, tflops in CARD_PEAKS:
        if re.search(pattern, name):
            return card, tflops
    return None


# ---- 1. mmcv ops against the CPU -----------------------------------------------------------
def fresh_leaf(t: torch.Tensor, device: str) -> torch.Tensor:
    """A copy of `t` on `device` that is a leaf requiring grad. `t.to('cpu')` of a CPU tensor
    is `t` itself: marking that one would make every later `.to(device)` of it a non-leaf
    without `.grad`."""
    return t.detach().to(device, copy=True).requires_grad_()


def check_mmcv_ops(device: str, seed: int = 0) -> list[dict]:
    """nms, batched_nms, RoIAlign forward and backward on `device` against the same calls on
    the CPU: rows of (op, max abs difference or 'same', passed)."""
    from mmcv.ops import batched_nms, nms, roi_align
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(300, 2, generator=g) * 200
    boxes = torch.cat([xy, xy + 4 + torch.rand(300, 2, generator=g) * 60], 1)
    scores = torch.rand(300, generator=g)
    idxs = torch.randint(0, 5, (300, ), generator=g)
    feats = torch.randn(2, 16, 32, 32, generator=g)
    rois = torch.cat([torch.randint(0, 2, (40, 1), generator=g).float(),
                      boxes[:40] / 8], 1)
    grad = torch.randn(40, 16, 7, 7, generator=g)

    def run(dev):
        _, keep = nms(boxes.to(dev), scores.to(dev), 0.5)
        _, bkeep = batched_nms(boxes.to(dev), scores.to(dev), idxs.to(dev),
                               dict(type='nms', iou_threshold=0.5))
        x = fresh_leaf(feats, dev)
        out = roi_align(x, rois.to(dev), (7, 7), 1.0, 2, 'avg', True)
        out.backward(grad.to(dev))
        return keep.cpu(), bkeep.cpu(), out.detach().cpu(), x.grad.cpu()

    ref, got = run('cpu'), run(device)
    rows = []
    for name, a, b in zip(('nms', 'batched_nms', 'roi_align forward', 'roi_align backward'),
                          ref, got):
        if a.dtype == torch.long:
            rows.append(dict(op=name, diff='same' if torch.equal(a, b) else 'differ',
                             passed=torch.equal(a, b)))
        else:
            diff = float((a - b).abs().max())
            rows.append(dict(op=name, diff=f'{diff:.2e}', passed=diff <= 1e-4))
    return rows


# ---- 2. code agreement ------------------------------------------------------------------------
def tokenizer_for_check(checkpoint: str | None, smoke: bool = False):
    """The tokenizer to check: a trained checkpoint (frozen, encoder and codebook), or the
    paper's architecture (smoke: a tiny one) with random weights and a codebook drawn from
    encoder outputs (the data initialisation)."""
    from ..tokenizer import FrozenPeCoTokenizer, PeCoTokenizer, cnn_parts
    if checkpoint:
        return FrozenPeCoTokenizer(checkpoint, config_key='--tokenizer')
    arch = cnn_parts(16, (1, 2, 2, 4), 1, embed_dims=16, num_embeddings=64) if smoke else {}
    torch.manual_seed(0)
    return PeCoTokenizer(with_decoder=False, perceptual_weight=0.0, frozen=True, **arch)


def check_code_agreement(tokenizer, device: str, num: int, img_size: int,
                         init_codebook: bool) -> dict:
    """`code_agreement` of `tokenizer` on `num` random smooth images (seeded) at `img_size`;
    with `init_codebook` (random weights) the codebook is first drawn from encoder outputs of
    other random images, so the codes are not all one codeword."""
    from .code_agreement import code_agreement
    tokenizer = tokenizer.to(device).eval()
    g = torch.Generator().manual_seed(0)

    def images(n):  # smooth random images in [-1, 1]: low-resolution noise, upsampled
        low = torch.rand(n, 3, img_size // 8, img_size // 8, generator=g) * 2 - 1
        return torch.nn.functional.interpolate(low, size=img_size, mode='bicubic').clamp(-1, 1)

    if init_codebook:
        with torch.no_grad():
            z = tokenizer.encoder(images(max(num, 8)).to(device))
            tokenizer.quantizer.initialise_codebook(
                z.permute(0, 2, 3, 1).reshape(-1, z.shape[1]).float())
    res = code_agreement(tokenizer, images(num).to(device), batch_size=8)
    return dict(res, images=num, img_size=img_size, device=device)


# ---- 3. throughput and MFU --------------------------------------------------------------------
def mfu_rows(device: str, peak_tflops: float, batch: int, steps: int, warmup: int,
             smoke: bool = False) -> list[dict]:
    """bf16 throughput of the tokenizer's encode and of the PeCo pretraining step, and their
    model FLOP utilisation against `peak_tflops` (FLOPs from torch's counter, as
    tools/benchmark.py counts them)."""
    from . import benchmark as bm
    rows = []
    name, size, tok = bm.tokenizer_models(dalle=False, smoke=smoke)[0]
    tok.to(device)
    x = torch.rand(batch, 3, size, size, device=device) * 2 - 1
    sec = statistics.median(bm.time_steps(lambda: tok.encode(x, bf16=True), steps, warmup,
                                          device))
    gflops = bm.count_gflops(lambda: tok.encode(x[:1])) * batch
    rows.append(mfu_row(f'{name} encode, bf16', batch, sec, gflops, peak_tflops))
    row = bm.bench_pretrain(['peco'], batch, steps, warmup, device, 'bf16', smoke)[0]
    rows.append(mfu_row('PeCo ViT-B/16 pretraining step, bf16' if not smoke else
                        'PeCo pretraining step (smoke sizes), bf16', batch,
                        row['ms_per_step'] / 1000, row['gflops_per_step'], peak_tflops))
    return rows


def mfu_row(what: str, batch: int, sec: float, gflops: float, peak_tflops: float) -> dict:
    achieved = gflops / sec / 1000  # TFLOP/s
    return dict(what=what, batch=batch, img_per_s=round(batch / sec, 2),
                tflops=round(achieved, 3), mfu=round(achieved / peak_tflops, 4))


# ---- 4. memory ---------------------------------------------------------------------------------
MEMORY_CONFIGS = [('ViT-B', 'configs/peco/pretrain_vitb_in1k_300e.py'),
                  ('ViT-L', 'configs/peco/pretrain_vitl_in1k_800e.py')]


def memory_rows(root: str, device: str, batch: int = 256) -> list[dict]:
    """Peak memory of a pretraining step at `batch` per GPU, config's AMP, with and without
    `with_cp` (measured on CUDA; an out-of-memory is reported as such)."""
    from . import benchmark as bm
    rows = []
    for arch, path in MEMORY_CONFIGS:
        for with_cp in (False, True):
            cfg = bm.load_config(os.path.join(root, path),
                                 {'model.backbone.with_cp': with_cp})
            try:
                peak = bm.plan_memory(cfg, [batch], device)['peak'][batch]
                value = f'{peak / 2**30:.1f} GiB'
            except torch.cuda.OutOfMemoryError:
                value = 'out of memory'
            finally:
                if device.startswith('cuda'):
                    torch.cuda.empty_cache()
            rows.append(dict(model=arch, with_cp=with_cp, batch=batch, peak=value))
    return rows


# ---- 5. two-process DDP and FSDP -------------------------------------------------------------
def two_process_steps(device_type: str, port: int = 29533, timeout: float = 300) -> list[dict]:
    """One training step of the smoke-size PeCo under DDP and under FSDP on two processes
    (NCCL on two GPUs; gloo on the CPU), then the largest difference between the ranks'
    weights (0 when the gradients were reduced)."""
    import torch.multiprocessing as mp
    ctx = mp.get_context('spawn')
    results = ctx.Manager().dict()
    procs = [ctx.Process(target=_rank_steps, args=(r, 2, device_type, port, results))
             for r in range(2)]
    for p in procs:
        p.start()
    deadline = time.time() + timeout
    for p in procs:
        p.join(max(1.0, deadline - time.time()))
        if p.is_alive():
            p.kill()
    if set(results.keys()) != {0, 1}:
        raise RuntimeError(f'two-process steps: ranks {sorted(results.keys())} of 0, 1 '
                           'finished; see the processes\' error output above')
    rows = []
    for wrap in ('DDP', 'FSDP'):
        a, b = results[0][wrap], results[1][wrap]
        rows.append(dict(wrapper=wrap, loss=round(a['loss'], 4),
                         rank_weight_diff=max(abs(x - y) for x, y in zip(a['sums'], b['sums']))))
    return rows


def _rank_steps(rank: int, world: int, device_type: str, port: int, results) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.nn.parallel import DistributedDataParallel as DDP

    from . import benchmark as bm  # (importing it registers peco_mm's types)
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    cuda = device_type == 'cuda'
    dist.init_process_group('nccl' if cuda else 'gloo', rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        device = f'cuda:{rank}' if cuda else 'cpu'
        if cuda:
            torch.cuda.set_device(rank)
        s = bm.pretrain_sizes(smoke=True)
        out = {}
        for wrap in ('DDP', 'FSDP'):
            torch.manual_seed(0)  # the same initial weights on both ranks
            with bm.quiet_logs():
                model = bm.build_pretrain_model('peco', s).to(device).train()
            if wrap == 'DDP':
                wrapped = DDP(model, device_ids=[rank] if cuda else None)
            else:
                wrapped = FSDP(model, device_id=rank if cuda else torch.device('cpu'),
                               use_orig_params=True)
            opt = torch.optim.AdamW([p for p in wrapped.parameters() if p.requires_grad],
                                    lr=1e-3)
            torch.manual_seed(1 + rank)  # each rank its own data
            inputs, samples = bm.pretrain_inputs('peco', s, 2, device)
            with torch.autocast(device_type, dtype=torch.bfloat16):
                losses = wrapped(inputs, samples, mode='loss')
            loss = sum(v for k, v in losses.items() if 'loss' in k)
            loss.backward()
            opt.step()
            if wrap == 'FSDP':
                with FSDP.summon_full_params(wrapped):
                    sums = [float(p.detach().double().sum()) for p in model.parameters()]
            else:
                sums = [float(p.detach().double().sum()) for p in model.parameters()]
            out[wrap] = dict(loss=float(loss), sums=sums)
        results[rank] = out
    finally:
        dist.destroy_process_group()


# ---- the report -------------------------------------------------------------------------------
@dataclass
class Check:
    """One gpu-check: its settings, and the results and skipped sections gathered so far."""
    root: str
    device: str
    tokenizer: str | None
    batch: int
    steps: int
    warmup: int
    agreement_images: int
    smoke: bool
    distributed_on_cpu: bool
    res: dict = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
        return self.device.startswith('cuda')

    def skip(self, section: str, why: str) -> list[str]:
        self.res['skipped'].append(dict(section=section, reason=why))
        return []


def section_mmcv_ops(c: Check) -> list[str]:
    if not c.cuda:
        return c.skip('mmcv ops on the GPU against the CPU', 'no CUDA')
    rows = c.res['mmcv_ops'] = check_mmcv_ops(c.device)
    return ['## torchvision-backed mmcv ops, on the GPU against the CPU', '',
            '| op | max abs difference | passed |', '|---|---:|---|'] + [
                f"| {r['op']} | {r['diff']} | {'yes' if r['passed'] else '**NO**'} |"
                for r in rows] + ['']


def section_agreement(c: Check) -> list[str]:
    size = 64 if c.smoke else 224
    num = c.agreement_images if c.cuda and not c.smoke else min(c.agreement_images, 8)
    a = c.res['code_agreement'] = check_code_agreement(
        tokenizer_for_check(c.tokenizer, c.smoke), c.device, num, size,
        init_codebook=not c.tokenizer)
    which = c.tokenizer or ('paper architecture' if not c.smoke else 'tiny (smoke)') + \
        ', random weights, codebook from encoder outputs'
    return ['## bf16 code agreement of the tokenizer (`encode`, bf16 autocast against fp32)',
            '', f"Tokenizer: {which}; {a['images']} random smooth images at "
            f"{a['img_size']} px on {c.device}.", '',
            '| codes | flipped | agreement | median gap (flipped) |', '|---:|---:|---:|---:|',
            f"| {a['codes']:.0f} | {a['flipped']:.0f} | {a['agreement']:.2%} | "
            f"{a['flipped_median_gap']:.2e} |", '']


def section_mfu(c: Check) -> list[str]:
    peak = c.res['card_peak']
    if not (c.cuda and peak):
        return c.skip('throughput and MFU', f"{c.res['device']} not in CARD_PEAKS"
                      if c.cuda else 'no CUDA')
    rows = c.res['mfu'] = mfu_rows(c.device, peak[1], c.batch, c.steps, c.warmup, c.smoke)
    return [f'## Throughput and MFU in bf16 (against {peak[1]:.0f} TFLOP/s)', '',
            '| what | batch | img/s | TFLOP/s | MFU |', '|---|---:|---:|---:|---:|'] + [
                f"| {r['what']} | {r['batch']} | {r['img_per_s']} | {r['tflops']} | "
                f"{r['mfu']:.1%} |" for r in rows] + ['']


def section_memory(c: Check) -> list[str]:
    if not c.cuda or c.smoke:
        return c.skip('memory at the paper batch', 'smoke run' if c.cuda else
                      'no CUDA (CPU estimate: tools/benchmark.py memory)')
    rows = c.res['memory'] = memory_rows(c.root, c.device)
    return ['## Peak memory of a pretraining step at 256 images per GPU (2048 / 8)', '',
            '| model | with_cp | peak |', '|---|---|---:|'] + [
                f"| {r['model']} | {r['with_cp']} | {r['peak']} |" for r in rows] + ['']


def section_distributed(c: Check) -> list[str]:
    if not ((c.cuda and torch.cuda.device_count() >= 2) or c.distributed_on_cpu):
        return c.skip('DDP and FSDP step on two GPUs', 'fewer than two GPUs visible' if c.cuda
                      else 'no CUDA (--distributed-on-cpu runs it over gloo)')
    rows = c.res['distributed'] = two_process_steps('cuda' if c.cuda else 'cpu')
    where = 'GPUs (NCCL)' if c.cuda else 'CPU processes (gloo)'
    return [f'## DDP and FSDP step on two {where}', '',
            "| wrapper | loss | largest difference of the ranks' weights |", '|---|---:|---:|'] + [
                f"| {r['wrapper']} | {r['loss']} | {r['rank_weight_diff']:.1e} |"
                for r in rows] + ['']


SECTIONS: list[tuple[str, Callable[[Check], list[str]]]] = [
    ('mmcv ops', section_mmcv_ops), ('code agreement', section_agreement),
    ('throughput and MFU', section_mfu), ('memory', section_memory),
    ('two-process steps', section_distributed)]


def run_gpu_check(root: str, device: str, tokenizer: str | None = None, batch: int = 64,
                  steps: int = 5, warmup: int = 2, agreement_images: int = 64,
                  smoke: bool = False, distributed_on_cpu: bool = False,
                  log: Callable[[str], None] = print) -> tuple[dict, list[str]]:
    """Every section that means something on `device`; (results, Markdown lines). Sections
    that need CUDA (or two GPUs) are listed under 'Skipped' with the reason; a section that
    raises is listed under 'Failed' with its error, and the others still run."""
    from ..engine.optimizers import cpu_has_native_bf16
    c = Check(root, device, tokenizer, batch, steps, warmup, agreement_images, smoke,
              distributed_on_cpu)
    name = torch.cuda.get_device_name(device) if c.cuda else 'CPU'
    peak = card_peak(name) if c.cuda else None
    res = c.res = dict(device=name, torch=torch.__version__, cuda=torch.version.cuda,
                       gpus=torch.cuda.device_count(), cpu_native_bf16=cpu_has_native_bf16(),
                       card_peak=peak, skipped=[], failed=[])
    lines = ['# peco_mm GPU check', '',
             f'Device: {name}; torch {res["torch"]}, CUDA {res["cuda"]}, {res["gpus"]} GPU(s) '
             f'visible; this CPU has native bf16: {res["cpu_native_bf16"]}.']
    if c.cuda:
        lines.append(f'bf16 dense peak: {peak[1]:.0f} TFLOP/s ({peak[0]}, datasheet)' if peak
                     else f'{name} is not in the table of card peaks: MFU is not computed.')
    lines.append('')
    for title, section in SECTIONS:
        log(f'{title} ...')
        try:
            lines += section(c)
        except Exception as e:  # one report shows every section: name the error, go on
            res['failed'].append(dict(section=title, error=f'{type(e).__name__}: {e}'))
            log(f'{title} FAILED: {type(e).__name__}: {e}')
    if res['skipped']:
        lines += ['## Skipped', ''] + [f"- {s['section']}: {s['reason']}"
                                       for s in res['skipped']] + ['']
    if res['failed']:
        lines += ['## Failed', ''] + [f"- {f['section']}: `{f['error']}`"
                                      for f in res['failed']] + ['']
    return res, lines
