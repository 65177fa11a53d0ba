"""The codeword linear probe of PeCo (Table 4): how much semantics the codebook carries.

A frozen trained tokenizer maps an image to its codes; each code is replaced by its quantized
codeword and the codewords are averaged over the image, giving one D-dimensional feature per
image that a linear classifier is trained on (the paper: ImageNet-1K train, tested on val).
As an mmpretrain backbone, the host's own classifier, head, data pipeline and `Accuracy` run
the probe (configs/peco/linear_codewords_in1k.py). DALL-E's row of the table uses
`DalleTokenizer`, whose codewords are its decoder's code embedding
(configs/peco/linear_codewords_dalle_in1k.py).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..registry import MODELS
from .frozen import FrozenPeCoTokenizer


@MODELS.register_module()
class CodewordPoolBackbone(nn.Module):
    """Frozen tokenizer -> average-pooled quantized codewords, (B, D).

    Args:
        checkpoint: a tokenizer checkpoint written by tools/train.py (any
            configs/peco/tokenizer_*.py), read as `FrozenPeCoTokenizer` reads it.
        channels_last: as `FrozenPeCoTokenizer`.
        tokenizer: instead of `checkpoint`, the config of another frozen tokenizer with
            `encode` and `codewords`, e.g. dict(type='DalleTokenizer', encoder=..., decoder=...).
    Inputs are the tokenizer's: RGB in [-1, 1] (mean = std = 127.5 in the data preprocessor),
    a multiple of its downsampling factor in size.
    """

    def __init__(self, checkpoint: str | None = None, channels_last: bool | str = 'auto',
                 tokenizer: dict | None = None) -> None:
        super().__init__()
        if tokenizer is not None:
            if checkpoint is not None:
                raise ValueError('CodewordPoolBackbone: give checkpoint (a PeCo tokenizer) or '
                                 'tokenizer (a config), not both')
            self.tokenizer = MODELS.build(dict(tokenizer, config_key='model.backbone.tokenizer'))
        else:
            self.tokenizer = FrozenPeCoTokenizer(checkpoint, channels_last=channels_last,
                                                 config_key='model.backbone.checkpoint')
        self.embed_dims = self.tokenizer.embed_dims

    def init_weights(self) -> None:
        """Nothing to do: the tokenizer was read from its checkpoint when it was built."""

    def train(self, mode: bool = True) -> 'CodewordPoolBackbone':
        return super().train(False)  # the tokenizer stays frozen, in eval mode

    def forward(self, img: torch.Tensor) -> tuple[torch.Tensor]:
        codes = self.tokenizer.encode(img)  # (B, h, w)
        codewords = self.tokenizer.codewords(codes)  # (B, D, h, w)
        return (codewords.mean(dim=(2, 3)).float(),)  # (B, D)
