"""The pretraining data preprocessor: the ViT's view and the tokenizer's view of one crop.

BEiT's pipeline resizes one random crop twice, for the ViT and for the tokenizer, and
normalises each its own way (mmpretrain's `TwoNormDataPreprocessor`). PeCo's tokenizer reads
the same 224 px as the ViT, with the same interpolation, so the second resize reproduces the
first exactly: the shipped pipeline resizes once (`second_size=None`) and this preprocessor
normalises that one view twice. Each data worker does one resize less and each batch moves one
image per sample to the device instead of two.
"""
from __future__ import annotations

from mmpretrain.models.utils import TwoNormDataPreprocessor

from ..registry import MODELS


@MODELS.register_module(force=True)  # replaces the stand-in registered by `import peco_mm`
class OneViewTwoNormDataPreprocessor(TwoNormDataPreprocessor):
    """`TwoNormDataPreprocessor` that also takes one view per sample and gives it to both.

    Inputs: a (B, 3, H, W) uint8 batch (or a list holding one) -> [ViT view normalised by
    `mean`/`std`, the same pixels normalised by `second_mean`/`second_std`]; two views (a
    list of two batches) are mmpretrain's path, unchanged. Arguments as mmpretrain's.
    """

    def forward(self, data: dict, training: bool = False) -> dict:
        inputs = data['inputs']
        if isinstance(inputs, (list, tuple)):
            if len(inputs) == 2:
                return super().forward(data, training)
            if len(inputs) != 1:
                raise ValueError(f'{type(self).__name__}: inputs hold {len(inputs)} views; '
                                 'expected one (ViT and tokenizer share it) or two')
            inputs = inputs[0]
        data = self.cast_data(dict(data, inputs=inputs))  # one copy to the device
        img = data['inputs']  # (B, 3, H, W)
        if self._channel_conversion:
            img = img[:, [2, 1, 0], ...]
        img = img.float()
        views = [img, img]
        if self._enable_normalize:
            views = [(img - self.mean) / self.std, (img - self.second_mean) / self.second_std]
        return {'inputs': views, 'data_samples': data['data_samples']}
