"""Patch discriminator for the adversarial ablation of PeCo (Table 7, Eq. 7): a PatchGAN
(Isola et al. 2017; Li & Wand 2016) that scores overlapping patches as real or reconstructed.
Adding its loss (weight 0.4) did not help transfer in the paper; it is there to reproduce that.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..registry import MODELS


@MODELS.register_module()
class PatchDiscriminator(nn.Module):
    """Conv(4, s2)-LeakyReLU, then `num_layers` × [Conv(4, s2)-BN-LeakyReLU], then two
    stride-1 convs down to one logit per patch: (B, 3, H, W) -> (B, 1, h, w)."""

    def __init__(self, in_channels: int = 3, base_channels: int = 64,
                 num_layers: int = 3) -> None:
        super().__init__()
        if num_layers < 1 or base_channels < 1:
            raise ValueError(f'num_layers={num_layers}, base_channels={base_channels}: both '
                             'must be >= 1')
        layers: list[nn.Module] = [nn.Conv2d(in_channels, base_channels, 4, 2, 1),
                                   nn.LeakyReLU(0.2, True)]
        c = base_channels
        for i in range(1, num_layers + 1):
            out = base_channels * min(2 ** i, 8)
            stride = 2 if i < num_layers else 1
            layers += [nn.Conv2d(c, out, 4, stride, 1, bias=False), nn.BatchNorm2d(out),
                       nn.LeakyReLU(0.2, True)]
            c = out
        layers.append(nn.Conv2d(c, 1, 4, 1, 1))
        self.net = nn.Sequential(*layers)
        for m in self.modules():  # DCGAN init
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, 0.0, 0.02)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.normal_(m.weight, 1.0, 0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def discriminator_loss(logits_real: torch.Tensor, logits_fake: torch.Tensor) -> torch.Tensor:
    """-[log D(x) + log(1 - D(x̂))], averaged over patches (Eq. 7, the max over D)."""
    real, fake = logits_real.float(), logits_fake.float()  # reduced in fp32 under autocast
    return 0.5 * (F.softplus(-real).mean() + F.softplus(fake).mean())


def generator_loss(logits_fake: torch.Tensor) -> torch.Tensor:
    """Non-saturating generator loss -log D(x̂)."""
    return F.softplus(-logits_fake.float()).mean()
