"""The K-way code classifier of PeCo's BERT objective (Dong et al., AAAI 2023, Sec. 3.3, Eq. 7).

A linear layer maps the hidden vector h^t of each masked patch to logits over the K codewords
of the frozen tokenizer; the loss is the cross-entropy against the tokenizer's code k^t,
averaged over the masked patches (Eq. 7 sums; BEiT's implementation averages, which only
rescales the learning rate). The masked-token accuracy is logged beside it.

The head receives the masked positions already gathered, (B, M, C) with a fixed M per batch, so
nothing in it depends on data-dependent shapes and it never synchronises with the host
(mmpretrain's `BEiTV1Head` boolean-indexes `feats[mask]`, which does).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModule
from torch.nn.init import trunc_normal_

from ..layers.quantizer import CODEBOOK_SIZE
from ..registry import MODELS


@MODELS.register_module()
class PeCoMIMHead(BaseModule):
    """Linear K-way classifier + cross-entropy on masked positions + masked-token accuracy.

    Args:
        in_channels: width of the features it classifies (the ViT or MAE-decoder width).
        num_classes: K, the tokenizer's codebook size (checked against it by `PeCo`).
        loss_weight: multiplies the cross-entropy.
        init_std: std of the truncated-normal init of the classifier weight (BEiT: 0.02).
    """

    def __init__(self,
                 in_channels: int = 768,
                 num_classes: int = CODEBOOK_SIZE,
                 loss_weight: float = 1.0,
                 init_std: float = 0.02,
                 init_cfg: dict | list | None = None) -> None:
        super().__init__(init_cfg=init_cfg)
        if in_channels <= 0 or num_classes <= 1:
            raise ValueError(f'in_channels={in_channels}, num_classes={num_classes}; need '
                             'in_channels > 0 and num_classes > 1')
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.loss_weight = loss_weight
        self.init_std = init_std
        self.fc = nn.Linear(in_channels, num_classes)

    def init_weights(self) -> None:
        super().init_weights()
        if self.init_cfg is None:
            trunc_normal_(self.fc.weight, std=self.init_std)
            nn.init.zeros_(self.fc.bias)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        """(B, M, C) features -> (B, M, K) logits."""
        return self.fc(feats)

    def loss(self, feats: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
        """Eq. 7 over the masked patches. feats (B, M, C), target (B, M) long codes."""
        if feats.shape[:2] != target.shape:
            raise ValueError(f'masked features {tuple(feats.shape)} and target codes '
                             f'{tuple(target.shape)} disagree on (B, M)')
        logits = self(feats)  # (B, M, K), bf16 under autocast
        # log-softmax and loss in fp32 whatever autocast's operator lists say on this device
        loss = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten())
        with torch.no_grad():
            acc = (logits.argmax(-1) == target).float().mean()
        return dict(loss=loss * self.loss_weight, mim_acc=acc)
