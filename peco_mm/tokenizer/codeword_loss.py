"""Explicit losses on the codewords: the two alternatives to the perceptual loss in PeCo's
"Implicit vs. Explicit" discussion (Table 6: 82.9 top-1 each, against 84.1 for the perceptual
loss on images).

What the paper says: "1) supervised classification loss over the codewords; 2) constraining a
momentum contrastive loss over the quantized codewords through data augmentation in a
self-supervised way." Nothing more (no head, pooling, weight, augmentation or queue).

What is ours, chosen as the closest standard recipe:
- both act on the straight-through quantised latents zq (B, D, h, w), average-pooled over the
  h×w positions, so their gradient reaches the encoder as the pixel loss's does; the EMA
  codebook then follows the encoder's outputs;
- 'classification': mmpretrain's `LinearClsHead` (a linear layer, cross-entropy) on the pooled
  codewords against the image labels;
- 'contrastive': MoCo v2 (He et al. 2020; Chen et al. 2020) with mmpretrain's and mmengine's
  parts (`MoCoV2Neck` 2-layer MLP projector, `ContrastiveHead`, `ExponentialMovingAverage`):
  queries from the online encoder's codewords of the training view, keys from a momentum
  encoder's codewords (quantised with the same codebook) of a second view drawn on the device
  with MoCo v2's augmentations (torchvision: random resized crop 0.2-1, colour jitter
  0.4/0.4/0.4/0.1 with p 0.8, greyscale p 0.2, Gaussian blur p 0.5, flip), a queue of
  negatives, temperature 0.2, momentum 0.999.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

CODEWORD_LOSSES = ('classification', 'contrastive')


class CodewordClassificationLoss(nn.Module):
    """Cross-entropy of a linear classifier on the average-pooled quantised codewords.

    Args:
        embed_dims: D, the codeword width.
        num_classes: classes of the labelled training set (1000 for ImageNet-1K).
    """

    def __init__(self, embed_dims: int, num_classes: int = 1000) -> None:
        super().__init__()
        if num_classes < 2:
            raise ValueError(f'codeword classification: num_classes={num_classes} must be >= 2')
        from mmengine.registry import DefaultScope
        from mmpretrain.registry import MODELS
        with DefaultScope.overwrite_default_scope('mmpretrain'):  # whatever scope is current
            self.head = MODELS.build(dict(type='LinearClsHead', num_classes=num_classes,
                                          in_channels=embed_dims))
        self.head.init_weights()

    def forward(self, zq: torch.Tensor, img: torch.Tensor, data_samples: list | None,
                **_) -> torch.Tensor:
        if not data_samples or any(getattr(s, 'gt_label', None) is None
                                   for s in data_samples):
            raise ValueError("codeword_loss='classification' needs image labels: train on a "
                             'labelled dataset (e.g. ImageNet split=train, or a CustomDataset '
                             'with with_label=True)')
        pooled = zq.float().mean((2, 3))  # (B, D)
        return self.head.loss((pooled,), data_samples)['loss']


class CodewordContrastiveLoss(nn.Module):
    """MoCo v2 on the average-pooled quantised codewords of two views (see the module
    docstring).

    Args:
        encoder: the tokenizer's encoder; a momentum copy of it encodes the key view.
        embed_dims: D, the codeword width.
        queue_size: negatives kept (MoCo: 65536).
        proj_dims, hid_dims: the MLP projector's output and hidden widths (MoCo v2: 128, 2048).
        temperature: of the InfoNCE softmax (MoCo v2: 0.2).
        momentum: EMA weight of the online encoder per step (mmengine's convention:
            0.001 = MoCo's m = 0.999).
    """

    def __init__(self, encoder: nn.Module, embed_dims: int, queue_size: int = 65536,
                 proj_dims: int = 128, hid_dims: int = 2048, temperature: float = 0.2,
                 momentum: float = 0.001) -> None:
        super().__init__()
        if queue_size < 1 or proj_dims < 1 or hid_dims < 1:
            raise ValueError(f'codeword contrastive: queue_size={queue_size}, proj_dims='
                             f'{proj_dims}, hid_dims={hid_dims} must be >= 1')
        if temperature <= 0 or not 0 < momentum < 1:
            raise ValueError(f'codeword contrastive: temperature={temperature} must be > 0 and '
                             f'momentum={momentum} in (0, 1)')
        from mmengine.model import ExponentialMovingAverage
        from mmengine.registry import DefaultScope
        from mmpretrain.models import ContrastiveHead, MoCoV2Neck
        self.neck = MoCoV2Neck(embed_dims, hid_dims, proj_dims)
        with DefaultScope.overwrite_default_scope('mmpretrain'):  # its loss from mmpretrain's
            self.head = ContrastiveHead(loss=dict(type='CrossEntropyLoss'),
                                        temperature=temperature)
        # (momentum encoder, momentum neck); copied from the online ones at the first update
        self.momentum_encoder = ExponentialMovingAverage(nn.Sequential(encoder, self.neck),
                                                         momentum)
        self.register_buffer('queue', F.normalize(torch.randn(queue_size, proj_dims), dim=1))
        self.register_buffer('queue_ptr', torch.zeros((), dtype=torch.long))
        self.augment = moco_v2_augmentation()

    def forward(self, zq: torch.Tensor, img: torch.Tensor, data_samples: list | None = None,
                *, encoder: nn.Module, quantizer: nn.Module) -> torch.Tensor:
        q = F.normalize(self.neck((zq.float(),))[0], dim=1)  # (B, P) queries
        k = self.keys(img, encoder, quantizer)  # (B, P)
        pos = (q * k).sum(1, keepdim=True)  # (B, 1)
        neg = q @ self.queue.clone().t()  # (B, Q)
        loss = self.head.loss(pos, neg)
        self.enqueue(k)
        return loss

    @torch.no_grad()
    def keys(self, img: torch.Tensor, encoder: nn.Module, quantizer: nn.Module
             ) -> torch.Tensor:
        """Momentum update, then the key view's quantised codewords -> normalised keys."""
        online_neck = self.neck
        self.momentum_encoder.update_parameters(nn.Sequential(encoder, online_neck))
        enc_k, neck_k = self.momentum_encoder.module
        view = self.second_view(img)  # (B, 3, H, W) in [-1, 1]
        zq_k = quantizer.codes_to_vectors(quantizer.encode(enc_k(view)))  # (B, D, h, w)
        return F.normalize(neck_k((zq_k.float(),))[0], dim=1)

    @torch.no_grad()
    def second_view(self, img: torch.Tensor) -> torch.Tensor:
        """Each image augmented on its own, in [0, 1] as torchvision expects."""
        x = ((img.float() + 1) / 2).clamp(0, 1)
        return torch.stack([self.augment(im) for im in x]) * 2 - 1

    @torch.no_grad()
    def enqueue(self, keys: torch.Tensor) -> None:
        """Keys of every rank replace the oldest entries of the queue."""
        from mmengine.dist import all_gather
        keys = torch.cat(all_gather(keys.contiguous()), 0)
        Q = self.queue.shape[0]
        idx = (self.queue_ptr + torch.arange(keys.shape[0], device=keys.device)) % Q
        self.queue[idx[-Q:]] = keys[-Q:]
        self.queue_ptr.copy_((self.queue_ptr + keys.shape[0]) % Q)


def moco_v2_augmentation() -> nn.Module:
    """MoCo v2's augmentations for (3, H, W) float images in [0, 1], output size = input
    size (torchvision's transforms v2)."""
    from torchvision.transforms import v2

    class SameSizeCrop(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return v2.RandomResizedCrop(tuple(x.shape[-2:]), scale=(0.2, 1.0),
                                        antialias=True)(x)

    class SizedBlur(nn.Module):  # kernel ~ 10 % of the side (23 px at 224), as SimCLR/MoCo
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            k = max(3, x.shape[-1] // 10 // 2 * 2 + 1)
            return v2.GaussianBlur(k, sigma=(0.1, 2.0))(x)

    return nn.Sequential(
        SameSizeCrop(),
        v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
        v2.RandomGrayscale(p=0.2),
        v2.RandomApply([SizedBlur()], p=0.5),
        v2.RandomHorizontalFlip(),
    )


def build_codeword_loss(kind: str, encoder: nn.Module, embed_dims: int, **kwargs) -> nn.Module:
    if kind == 'classification':
        return CodewordClassificationLoss(embed_dims, **kwargs)
    if kind == 'contrastive':
        return CodewordContrastiveLoss(encoder, embed_dims, **kwargs)
    raise ValueError(f'codeword_loss={kind!r}; allowed: {CODEWORD_LOSSES}')
