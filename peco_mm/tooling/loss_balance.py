"""How much each term of the tokenizer loss (Eq. 5) pulls on the reconstruction.

For images x and reconstructions x̂, the pixel term L_pixel = mean |x - x̂| and the perceptual
term λ·L_percep (Eq. 4) each have a gradient at x̂; the perceptual share
||λ∇L_percep|| / (||∇L_pixel|| + ||λ∇L_percep||) says whether λ matters at all (a share near 0:
the tokenizer is trained by the pixel loss alone, whatever λ says). Training logs the same
quantity as `percep_grad_share`; `tools/measure_grad_share.py` tabulates it over λ.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from ..tokenizer.tokenizer import gradient_share


def term_gradient_norms(perceptual, img: torch.Tensor, recon: torch.Tensor,
                        pixel_loss: str = 'l1') -> tuple[torch.Tensor, torch.Tensor]:
    """(||∇_x̂ L_pixel||, ||∇_x̂ L_percep||) at the reconstruction, L_percep unweighted."""
    recon = recon.detach().float().requires_grad_(True)
    pix = F.l1_loss(recon, img) if pixel_loss == 'l1' else F.mse_loss(recon, img)
    (g_pix,) = torch.autograd.grad(pix, recon)
    (g_per,) = torch.autograd.grad(perceptual(img, recon), recon)
    return g_pix.norm(), g_per.norm()


def perceptual_gradient_shares(perceptual, img: torch.Tensor, recon: torch.Tensor,
                               lambdas: Sequence[float] = (0.3, 1.0, 3.0, 10.0),
                               pixel_loss: str = 'l1') -> dict[float, float]:
    """{λ: the perceptual term's share of the gradient at the reconstruction}."""
    n_pix, n_per = term_gradient_norms(perceptual, img, recon, pixel_loss)
    return {float(lam): float(gradient_share(n_pix, lam * n_per)) for lam in lambdas}
