"""Checks the study report makes of its networks (tools/study.py), kept importable so the tests
can hold them to their claims.

- `knn_accuracy`: leave-one-out 1-NN accuracy of features, the shape check of a perceptual or
  measuring network;
- `trained_and_random`: a converted network and the same architecture at random
  initialisation, the baseline that says what training earned.
"""
from __future__ import annotations

from typing import Sequence

import torch


@torch.no_grad()
def knn_accuracy(features: torch.Tensor, labels: torch.Tensor) -> float:
    """Leave-one-out 1-nearest-neighbour accuracy (%) of (N, C) features under cosine
    similarity: does each image's closest other image share its label?"""
    f = torch.nn.functional.normalize(features.float(), dim=1)
    sim = f @ f.T  # (N, N)
    sim.fill_diagonal_(-float('inf'))
    return float((labels[sim.argmax(1)] == labels).float().mean() * 100)


def trained_and_random(pecovit: str, num_heads: int, seeds: Sequence[int] = (0, 1, 2)
                       ) -> tuple[torch.nn.Module, list[torch.nn.Module]]:
    """A converted PeCoViT checkpoint in eval mode, mean-pooled, and the same architecture
    initialised at random once per seed (what its training started from): the baseline that
    says how much of a feature's score the training earned. The architecture comes from the
    arguments the converter stored, whatever `out_type` they name."""
    from ..checkpoint import read_checkpoint
    from ..models.vit import PeCoViT
    trained = PeCoViT.from_checkpoint(pecovit, num_heads=num_heads, out_type='avg_featmap')
    args = dict(read_checkpoint(pecovit)['meta']['pecovit_args'], out_type='avg_featmap')
    randoms = []
    for seed in seeds:
        torch.manual_seed(seed)
        net = PeCoViT(**args)
        net.init_weights()
        randoms.append(net.eval())
    return trained.eval(), randoms
