"""Table 4's second column: a frozen ImageNet classifier (the paper: DeiT-T, 72.2 % top-1 on
clean val) scoring the images a tokenizer reconstructs. The better the codes keep what a
classifier needs, the higher its accuracy on their decodings.

`ReconstructionViT` is mmpretrain's `VisionTransformer` that first passes its input through a
frozen tokenizer (encode, decode) and rounds the reconstruction to 8-bit pixels, as a saved
image would be. Its own weights keep mmpretrain's names, so the classifier's checkpoint, as
mmpretrain's DeiT recipe writes it, loads unchanged (configs/peco/recon_deit_tiny_in1k.py).
"""
from __future__ import annotations

import torch
from mmpretrain.models import VisionTransformer

from ..registry import MODELS
from ..utils.held import follow_buffer
from ..utils.image import IMAGENET_MEAN, IMAGENET_STD


@MODELS.register_module(force=True)  # replaces the stand-in registered by `import peco_mm`
class ReconstructionViT(VisionTransformer):
    """mmpretrain's ViT on a frozen tokenizer's reconstructions of its input.

    Args:
        tokenizer: the tokenizer checkpoint written by tools/train.py (read with its decoder,
            frozen), or the config of another frozen tokenizer with `encode` and `decode`
            (DALL-E's row: dict(type='DalleTokenizer', encoder=..., decoder=...)). It is kept
            outside this module's state dict: the classifier's checkpoint holds no tokenizer
            weights, and `tools/test.py --checkpoint` loads it strictly.
        mean, std: the classifier's input normalisation (RGB, 0-255), ImageNet's by default.
        **kwargs: mmpretrain's `VisionTransformer` (e.g. arch='deit-tiny').
    Inputs are the tokenizer's: RGB in [-1, 1] (the data preprocessor's mean = std = 127.5).
    """

    def __init__(self, tokenizer: str | dict, mean: tuple = tuple(IMAGENET_MEAN),
                 std: tuple = tuple(IMAGENET_STD), **kwargs) -> None:
        super().__init__(**kwargs)
        if isinstance(tokenizer, dict):
            frozen = MODELS.build(dict(tokenizer, config_key='model.backbone.tokenizer'))
        else:
            frozen = MODELS.build(dict(type='FrozenPeCoTokenizer', checkpoint=tokenizer,
                                       with_decoder=True, channels_last=False,
                                       config_key='model.backbone.tokenizer'))
        self._tokenizer = [frozen.requires_grad_(False).eval()]  # a list: not a submodule
        self.register_buffer('pixel_mean', torch.tensor(mean).view(1, 3, 1, 1), False)
        self.register_buffer('pixel_std', torch.tensor(std).view(1, 3, 1, 1), False)

    @property
    def tokenizer(self):
        """The frozen tokenizer, on the device and in the dtype of the `pixel_mean` buffer
        (which .to(), .cuda(), .half() move with this module)."""
        return follow_buffer(self._tokenizer[0], self.pixel_mean)

    @torch.no_grad()
    def reconstruct(self, img: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) in [-1, 1] -> the reconstruction as 8-bit RGB values, float 0-255."""
        recon = self.tokenizer.decode(self.tokenizer.encode(img))  # (B, 3, H, W) in [-1, 1]
        return ((recon.float() + 1) * 127.5).round().clamp(0, 255)

    def forward(self, img: torch.Tensor) -> tuple:
        pixels = self.reconstruct(img)
        return super().forward((pixels - self.pixel_mean) / self.pixel_std)
