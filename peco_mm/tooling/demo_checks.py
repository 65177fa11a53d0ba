"""Checks the demo report makes, kept importable so the tests can hold them to their claims.

- `view_retrieval`: does a network see two augmented views of one image as the same image?
  Exactly what MoCo v3 trains for, and what a randomly initialised ViT cannot do once colour
  jitter, grey-scale, blur and solarisation have removed the low-level statistics that random
  features pick up. (Nearest-neighbour classification of crops by source photo does not tell
  the two apart: with three photos, colour statistics alone give 100 %.)
- `majority_code_rate`: the masked-token accuracy of always predicting the most frequent
  code, the floor a PeCo model has to beat.
"""
from __future__ import annotations

import random
from typing import Callable, Sequence

import numpy as np
import torch

from ..utils.image import IMAGENET_MEAN, IMAGENET_STD, load_images, normalize


def augmented_views(images: Sequence[np.ndarray], view_pipelines: Sequence[list], seed: int = 0
                    ) -> list[np.ndarray]:
    """Each view pipeline (mmpretrain transforms configs, as in a MultiView step) applied to
    every RGB uint8 image: one (N, H, W, 3) RGB uint8 array per pipeline."""
    from mmengine.dataset import Compose
    from mmengine.registry import init_default_scope
    init_default_scope('mmpretrain')
    random.seed(seed)
    np.random.seed(seed)
    out = []
    for pipeline in view_pipelines:
        transform = Compose(list(pipeline))
        # the pipelines expect BGR, as LoadImageFromFile reads it
        views = [transform(dict(img=np.ascontiguousarray(im[..., ::-1]),
                                img_shape=im.shape[:2], ori_shape=im.shape[:2]))['img']
                 for im in images]
        out.append(np.stack([v[..., ::-1] for v in views]))
    return out


@torch.no_grad()
def view_retrieval(features: Callable[[torch.Tensor], torch.Tensor],
                   images: Sequence[np.ndarray], view_pipelines: Sequence[list],
                   seeds: Sequence[int] = (0, 1, 2), mean=IMAGENET_MEAN,
                   std=IMAGENET_STD) -> dict[str, float]:
    """Find view 2 of image i among the view-2s of all N images from view 1 of image i
    (cosine similarity of `features`: (N, 3, H, W) -> (N, C)). Returns top-1 and top-5
    accuracy (%), averaged over augmentation `seeds`; chance is 100/N and 500/N."""
    top1, top5 = [], []
    for seed in seeds:
        a, b = (normalize(v, mean, std) for v in augmented_views(images, view_pipelines, seed))
        fa = torch.nn.functional.normalize(features(a).float(), dim=1)  # (N, C)
        fb = torch.nn.functional.normalize(features(b).float(), dim=1)
        sim = fa @ fb.T  # (N, N), positives on the diagonal
        rank = (sim >= sim.diag()[:, None]).sum(1) - 1  # competitors at least as close
        top1.append((rank == 0).float().mean().item() * 100)
        top5.append((rank < 5).float().mean().item() * 100)
    return dict(top1=float(np.mean(top1)), top5=float(np.mean(top5)))


@torch.no_grad()
def majority_code_rate(tokenizer, files: Sequence[str]) -> float:
    """Fraction of the codes of `files` (images of the tokenizer's input size) that are the
    most frequent code."""
    codes = tokenizer.encode(load_images(files))  # (N, h, w)
    return float(torch.bincount(codes.flatten()).max() / codes.numel())


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
