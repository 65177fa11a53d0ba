"""The fraction of equal codes between two encodings, position by position.

- `code_agreement`: do bf16 targets equal fp32 targets? The codes a tokenizer's `encode` gives
  identically with its encoder in bf16 autocast and in fp32 (the nearest-codeword search is
  fp32 in both), plus how close the flipped positions were to a tie. `encode_bf16` is only
  worth its speed if nearly every target survives; `tools/measure_code_agreement.py` runs it.
- `pair_agreement`: the judge-free measure of the study (tools/study.py): the codes of two
  images of one shape at one pose under different nuisances (colour, texture, background,
  lighting). A codebook that spends its codes on shape gives both the same codes.
"""
from __future__ import annotations

import torch


@torch.no_grad()
def code_agreement(tokenizer, images: torch.Tensor, batch_size: int = 8) -> dict[str, float]:
    """Encode `images` (N, 3, H, W) in [-1, 1] in fp32 and in bf16 autocast (on the images'
    device, CPU included); returns the agreement (fraction of equal codes), the number of
    codes, and for the flipped ones the median relative distance gap of fp32's two nearest
    codewords, (d2 - d1) / d1 (how near a tie they were)."""
    same = total = 0
    gaps = []
    for s in range(0, images.shape[0], batch_size):
        x = images[s:s + batch_size]
        fp32 = tokenizer.encode(x, bf16=False)  # (B, h, w)
        bf16 = tokenizer.encode(x, bf16=True)
        flip = fp32 != bf16
        same += int((~flip).sum())
        total += fp32.numel()
        if flip.any():
            gaps.append(nearest_gap(tokenizer, x)[flip])
    gap = torch.cat(gaps) if gaps else torch.zeros(0)
    return dict(agreement=same / max(total, 1), codes=float(total),
                flipped=float(total - same),
                flipped_median_gap=float(gap.median()) if gap.numel() else float('nan'))


@torch.no_grad()
def nearest_gap(tokenizer, x: torch.Tensor) -> torch.Tensor:
    """(B, h, w): (d2 - d1) / d1 of the two smallest squared distances to the codebook of the
    fp32 encoder output at each position."""
    z = tokenizer.encoder(x.float())  # (B, D, h, w)
    B, D, h, w = z.shape
    flat = z.permute(0, 2, 3, 1).reshape(-1, D)
    e = tokenizer.quantizer.embedding.float()
    d = torch.cdist(flat, e, compute_mode='donot_use_mm_for_euclid_dist').pow(2)  # (N, K)
    two = d.topk(2, dim=1, largest=False).values  # (N, 2)
    return ((two[:, 1] - two[:, 0]) / two[:, 0].clamp_min(1e-12)).view(B, h, w)


@torch.no_grad()
def pair_agreement(tokenizer, a: torch.Tensor, b: torch.Tensor, batch_size: int = 64) -> float:
    """The fraction of positions at which `a[i]` and `b[i]` (N, 3, H, W in [-1, 1], paired
    image by image) get the same code from the tokenizer's fp32 `encode`."""
    if a.shape != b.shape:
        raise ValueError(f'pair_agreement: paired images of shapes {tuple(a.shape)} and '
                         f'{tuple(b.shape)}; expected equal shapes')
    same = total = 0
    for s in range(0, a.shape[0], batch_size):
        ca = tokenizer.encode(a[s:s + batch_size], bf16=False)
        cb = tokenizer.encode(b[s:s + batch_size], bf16=False)
        same += int((ca == cb).sum())
        total += ca.numel()
    return same / max(total, 1)
