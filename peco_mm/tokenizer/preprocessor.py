"""The tokenizer's data preprocessor: uint8 images (BGR from mmcv's loader) -> RGB float in
[-1, 1], the input range of `encode`, `forward` and `decode` (`TOKENIZER_MEAN` /
`TOKENIZER_STD` state it for other pipelines, e.g. the second view of a MIM data
preprocessor)."""
from __future__ import annotations

from typing import Sequence

import torch
from mmengine.model import BaseDataPreprocessor

from ..registry import MODELS
from ..utils.image import TOKENIZER_MEAN, TOKENIZER_STD


def to_three_channels(img: torch.Tensor, where: str = 'an input image') -> torch.Tensor:
    """(..., C, H, W) with C in {1, 2, 3, 4} -> 3 channels: grey is repeated, alpha dropped."""
    c = img.shape[-3]
    if c == 3:
        return img
    if c in (1, 2):  # grey, grey + alpha
        return img.narrow(-3, 0, 1).expand(*img.shape[:-3], 3, *img.shape[-2:])
    if c == 4:  # colour + alpha
        return img.narrow(-3, 0, 3)
    raise ValueError(f'{where} has {c} channels; the tokenizer takes 1 (grey), 3 (colour) or '
                     '4 (colour + alpha) channels')


@MODELS.register_module()
class TokenizerDataPreprocessor(BaseDataPreprocessor):
    """uint8 images (BGR from mmcv's loader) -> RGB float in [-1, 1], stacked (B, 3, H, W).
    1- and 4-channel images are converted to 3 channels; other counts are an error naming
    the file. On same-size colour batches this is mmengine's `ImgDataPreprocessor` with the
    tokenizer's mean / std and `bgr_to_rgb=True` (tested); it is kept for the channel
    conversion and because mmengine's pads a batch of mixed sizes silently, which would put
    padding into the codes, where this one refuses the batch."""

    def __init__(self, mean: Sequence[float] = TOKENIZER_MEAN,
                 std: Sequence[float] = TOKENIZER_STD,
                 to_rgb: bool = True, non_blocking: bool = False) -> None:
        super().__init__(non_blocking)
        if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
            raise ValueError(f'mean={mean}, std={std}: need three values each, std > 0')
        self.to_rgb = to_rgb
        self.register_buffer('mean', torch.tensor(mean).view(1, 3, 1, 1), False)
        self.register_buffer('std', torch.tensor(std).view(1, 3, 1, 1), False)

    def forward(self, data: dict, training: bool = False) -> dict:
        data = self.cast_data(data)
        inputs, samples = data['inputs'], data.get('data_samples')
        imgs = []
        for i, img in enumerate(inputs):  # a list or a stacked tensor of (C, H, W)
            imgs.append(to_three_channels(img, _describe(samples, i)))
        sizes = {tuple(im.shape[-2:]) for im in imgs}
        if len(sizes) > 1:
            raise ValueError(f'images of one batch differ in size {sorted(sizes)}; crop or '
                             'resize them to one size in the pipeline')
        x = torch.stack(imgs).float()  # (B, 3, H, W)
        if self.to_rgb:
            x = x.flip(1)
        x = (x - self.mean) / self.std
        return dict(inputs=x, data_samples=samples)


def _describe(samples, i: int) -> str:
    try:
        path = samples[i].metainfo.get('img_path')
    except (AttributeError, IndexError, TypeError):
        path = None
    return f'image {path!r}' if path else f'image {i} of the batch'
