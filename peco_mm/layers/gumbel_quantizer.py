"""Gumbel-softmax quantizer: the discrete VAE of DALL-E (Ramesh et al. 2021), BEiT's tokenizer
family (Table 2's baseline), as a quantizer that a PeCo tokenizer uses in place of the EMA
vector quantizer (same contract, `peco_mm.layers.quantizer`).

Each position of the encoder's output z (B, D, h, w) gets logits over the K codes (a 1x1
convolution). In training the codeword is a relaxed sample: y = softmax((logits + g) / tau)
with Gumbel noise g, and the quantized vector is y @ E for the learned codebook E (K, D). The
temperature tau anneals exponentially from `tau_start` to `tau_end` over `anneal_iters` training
steps (DALL-E: 1 to 1/16), and the loss is `kl_weight` times the KL divergence of
q = softmax(logits) from the uniform prior over K codes, log K - H(q), averaged over positions.
`hard=True` makes the forward value the one-hot of the sample (straight-through gradients of
the relaxed one). Outside training, and in `encode`, the code is argmax(logits) and its
codeword E[code].

Plain PyTorch, no registry:
    quantized, codes, loss = q(z)            # (B, D, h, w) -> (B, D, h, w), (B, h, w), ()
    codes = q.encode(z)                      # argmax of the logits, no sampling
    vectors = q.codes_to_vectors(codes)      # (B, h, w) -> (B, D, h, w)
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .quantizer import codewords


def kl_to_uniform(logits: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """KL(softmax(logits) || uniform over K) = log K - entropy, per position (`dim` removed)."""
    logp = F.log_softmax(logits.float(), dim=dim)
    entropy = -(logp.exp() * logp).sum(dim)
    return math.log(logits.shape[dim]) - entropy


def annealed_temperature(step: int, tau_start: float, tau_end: float,
                         anneal_iters: int) -> float:
    """tau_start * (tau_end / tau_start) ** (step / anneal_iters), held at tau_end after."""
    frac = min(1.0, max(0, step) / anneal_iters)
    return tau_start * (tau_end / tau_start) ** frac


class GumbelQuantizer(nn.Module):
    """Gumbel-softmax codes over a learned codebook; see the module docstring.

    Args:
        num_embeddings: K, the codebook size.
        embed_dims: D, the codeword width (and the encoder's output width).
        tau_start, tau_end: the temperature at the first step and after `anneal_iters` steps.
        anneal_iters: training steps over which the temperature anneals.
        kl_weight: weight of the KL divergence to the uniform prior.
        hard: forward value one-hot (straight-through) instead of the relaxed sample.
    """

    def __init__(self, num_embeddings: int = 8192, embed_dims: int = 256,
                 tau_start: float = 1.0, tau_end: float = 1 / 16, anneal_iters: int = 1000,
                 kl_weight: float = 0.01, hard: bool = False) -> None:
        super().__init__()
        if num_embeddings < 2 or embed_dims < 1:
            raise ValueError(f'num_embeddings={num_embeddings} must be >= 2 and embed_dims='
                             f'{embed_dims} >= 1')
        if not 0 < tau_end <= tau_start or anneal_iters < 1:
            raise ValueError(f'tau_start={tau_start}, tau_end={tau_end}, anneal_iters='
                             f'{anneal_iters}: expected 0 < tau_end <= tau_start and '
                             'anneal_iters >= 1')
        if kl_weight < 0:
            raise ValueError(f'kl_weight={kl_weight} must be >= 0')
        self.num_embeddings, self.embed_dims = num_embeddings, embed_dims
        self.tau_start, self.tau_end, self.anneal_iters = tau_start, tau_end, anneal_iters
        self.kl_weight, self.hard = kl_weight, hard
        self.to_logits = nn.Conv2d(embed_dims, num_embeddings, 1)
        self.embedding = nn.Parameter(torch.randn(num_embeddings, embed_dims))  # (K, D)
        self.register_buffer('steps', torch.zeros((), dtype=torch.long))

    @property
    def temperature(self) -> float:
        return annealed_temperature(int(self.steps), self.tau_start, self.tau_end,
                                    self.anneal_iters)

    def logits(self, z: torch.Tensor) -> torch.Tensor:
        """(B, D, h, w) -> (B, K, h, w) fp32 logits."""
        if z.dim() != 4 or z.shape[1] != self.embed_dims:
            raise ValueError(f'quantizer expects (B, {self.embed_dims}, h, w), got '
                             f'{tuple(z.shape)}')
        return self.to_logits(z.float())

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """z -> (quantized (B, D, h, w), codes (B, h, w), kl_weight * KL to uniform)."""
        logits = self.logits(z)
        codes = logits.argmax(1)
        loss = self.kl_weight * kl_to_uniform(logits).mean()
        if not (self.training and torch.is_grad_enabled()):
            return self.codes_to_vectors(codes).to(z.dtype), codes, loss
        # the temperature as a tensor on the step counter's device: no host sync per step
        frac = self.steps.clamp(0, self.anneal_iters).float() / self.anneal_iters
        tau = self.tau_start * (self.tau_end / self.tau_start) ** frac
        soft = F.gumbel_softmax(logits, tau=tau, hard=self.hard, dim=1)
        self.steps.add_(1)
        quantized = torch.einsum('bkhw,kd->bdhw', soft, self.embedding.float())
        return quantized.to(z.dtype), codes, loss

    @torch.no_grad()
    def encode(self, z: torch.Tensor) -> torch.Tensor:
        """(B, D, h, w) -> (B, h, w) long: the most likely code at each position."""
        return self.logits(z).argmax(1)

    def codes_to_vectors(self, codes: torch.Tensor) -> torch.Tensor:
        """(B, h, w) long -> (B, D, h, w) codewords."""
        return codewords(codes, self.embedding)
