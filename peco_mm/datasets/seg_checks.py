"""Label-map checks for semantic segmentation that mmseg lacks.

mmseg trusts the PNG label maps: a value outside the classes (a wrong palette, a map saved
without `reduce_zero_label` in mind, an RGB map read as gray) silently becomes a class index
that the loss indexes out of range, or a CUDA device-side assert far from the cause.
`CheckSegLabels` sits right after `LoadAnnotations` and names the file instead.
"""
from __future__ import annotations

import numpy as np
from mmcv.transforms import BaseTransform

from ..registry import TRANSFORMS


@TRANSFORMS.register_module()
class CheckSegLabels(BaseTransform):
    """Raise ValueError naming the label file if `gt_seg_map` holds a value outside
    0..num_classes-1 other than `ignore_index` (values are checked after LoadAnnotations,
    i.e. after `reduce_zero_label`).

    Args:
        num_classes: number of classes the head predicts.
        ignore_index: the label the loss ignores (mmseg: 255).
    """

    def __init__(self, num_classes: int, ignore_index: int = 255) -> None:
        if not isinstance(num_classes, int) or num_classes <= 0:
            raise ValueError(f'CheckSegLabels: num_classes={num_classes!r}; allowed: an int > 0')
        self.num_classes = num_classes
        self.ignore_index = ignore_index

    def transform(self, results: dict) -> dict:
        seg = results.get('gt_seg_map')
        if seg is None:
            raise KeyError('CheckSegLabels needs `gt_seg_map`: put it after LoadAnnotations '
                           f'(got keys {sorted(results)})')
        seg = np.asarray(seg)  # (H, W) int
        bad = (seg < 0) | ((seg >= self.num_classes) & (seg != self.ignore_index))
        if bad.any():
            values = np.unique(seg[bad])
            shown = ', '.join(str(v) for v in values[:10]) + (' ...' if len(values) > 10 else '')
            zero = results.get('reduce_zero_label')
            raise ValueError(
                f"{results.get('seg_map_path', '<unknown label file>')}: label values "
                f'[{shown}] are outside the {self.num_classes} classes (allowed: '
                f'0..{self.num_classes - 1} and ignore_index={self.ignore_index}'
                + (', after reduce_zero_label maps 0 -> ignore and k -> k-1' if zero else '')
                + '). Expected a single-channel PNG of class indices (ADE20K: 0 = other, '
                '1..150 = classes).')
        return results

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}(num_classes={self.num_classes}, '
                f'ignore_index={self.ignore_index})')
