"""The fraction of equal codes between two encodings, position by position.

- `code_agreement`: do bf16 targets equal fp32 targets? The codes a tokenizer's `encode` gives
  identically with its encoder in bf16 autocast and in fp32 (the nearest-codeword search is
  fp32 in both), plus how close the flipped positions were to a tie. `encode_bf16` is only
  worth its speed if nearly every target survives; `tools/measure_code_agreement.py` runs it.
- `pair_agreement`: the judge-free measure of the study (tools/study.py): the codes of two
  images of one shape at one pose under different nuisances (colour, texture, background,
  lighting). A codebook that spends its codes on shape gives both the same codes;
- `repairing_agreement`: its floor, the agreement of the same codes over every re-pairing of
  the images (image i beside image j != i), computed exactly from the codes' counts at each
  position. A codebook that uses few codes makes any two images agree often; the matched
  pairs' agreement above this floor is the part a shared geometry explains.
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
def paired_codes(tokenizer, a: torch.Tensor, b: torch.Tensor,
                 batch_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """The tokenizer's fp32 codes (N, h, w) of `a` and of `b` (N, 3, H, W in [-1, 1], paired
    image by image)."""
    if a.shape != b.shape:
        raise ValueError(f'pair_agreement: paired images of shapes {tuple(a.shape)} and '
                         f'{tuple(b.shape)}; expected equal shapes')
    ca, cb = ([tokenizer.encode(x[s:s + batch_size], bf16=False)
               for s in range(0, x.shape[0], batch_size)] for x in (a, b))
    return torch.cat(ca), torch.cat(cb)


def pair_agreement(tokenizer, a: torch.Tensor, b: torch.Tensor, batch_size: int = 64) -> float:
    """The fraction of positions at which `a[i]` and `b[i]` get the same code
    (`paired_codes`)."""
    ca, cb = paired_codes(tokenizer, a, b, batch_size)
    return float((ca == cb).float().mean())


def repairing_agreement(ca: torch.Tensor, cb: torch.Tensor) -> float:
    """The mean over every re-pairing (i, j), j != i, of the fraction of positions at which
    `ca[i]` and `cb[j]` (codes, (N, h, w), N >= 2) agree: position by position, the pairs
    (i, j) with equal codes are sum_k count_a(k) count_b(k) less the N matched ones that agree,
    out of N (N - 1)."""
    if ca.shape != cb.shape or ca.dim() != 3 or ca.shape[0] < 2:
        raise ValueError(f'repairing_agreement: codes of shapes {tuple(ca.shape)} and '
                         f'{tuple(cb.shape)}; expected two equal (N, h, w) with N >= 2')
    n = ca.shape[0]
    k = int(torch.maximum(ca.max(), cb.max())) + 1
    fa, fb = (torch.nn.functional.one_hot(c.flatten(1).T.long(), k).sum(1).double()
              for c in (ca, cb))  # (h*w, K): each code's count at each position
    equal_pairs = (fa * fb).sum(1) - (ca == cb).flatten(1).sum(0).double()  # (h*w, )
    return float(equal_pairs.mean() / (n * (n - 1)))
