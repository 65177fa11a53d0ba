"""Checks the study report makes of its networks (tools/study.py), kept importable so the tests
can hold them to their claims.

- `knn_accuracy`: leave-one-out 1-NN accuracy of features, the shape check of a perceptual or
  measuring network;
- `trained_and_random`: a converted network and the same architecture at random
  initialisation, the baseline that says what training earned;
- `save_random_twin`: that random network written as a PeCoViT file, the perceptual network
  of the study's control tokenizer.
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
    from ..models.vit import PeCoViT
    trained = PeCoViT.from_checkpoint(pecovit, num_heads=num_heads, out_type='avg_featmap')
    randoms = [random_twin(pecovit, seed)[0].eval() for seed in seeds]
    return trained.eval(), randoms


def random_twin(pecovit: str, seed: int) -> tuple[torch.nn.Module, dict]:
    """(the PeCoViT of a converted file's architecture initialised at random with `seed`,
    mean-pooled; the arguments that build it), whatever `out_type` the file names."""
    from ..checkpoint import read_checkpoint
    from ..models.vit import PeCoViT
    from ..tokenizer.stored_parts import check_pecovit_args
    meta = read_checkpoint(pecovit).get('meta') or {}
    stored = check_pecovit_args(meta.get('pecovit_args') if isinstance(meta, dict) else None,
                                f'{pecovit} meta.pecovit_args')  # the closed schema's PeCoViT
    args = dict(stored, out_type='avg_featmap')
    torch.manual_seed(seed)
    net = PeCoViT(**args)
    net.init_weights()
    return net, args


def save_random_twin(pecovit: str, dst: str, seed: int) -> str:
    """`random_twin(pecovit, seed)` written to `dst` in the converter's format (state_dict
    and meta.pecovit_args), loadable wherever a converted perceptual network is."""
    from pathlib import Path
    net, args = random_twin(pecovit, seed)
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    torch.save({'state_dict': net.state_dict(),
                'meta': dict(pecovit_args=args, source=f'random initialisation, seed {seed}')},
               dst)
    return dst
