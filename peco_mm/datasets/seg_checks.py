"""Label-map checks for semantic segmentation that mmseg lacks.

mmseg trusts the PNG label maps: a value outside the classes (a wrong palette, a map saved
without `reduce_zero_label` in mind, an RGB map read as gray) silently becomes a class index
that the loss indexes out of range, or a CUDA device-side assert far from the cause.
A 16-bit label map is read as 8 bits (`astype(np.uint8)`): class 300 silently becomes 44.
A label map that does not fit its image trains silently too (one smaller than its image, or
transposed, is resized and cropped along with it), and an RGB label map fails later with a bare
`stack expects each tensor to be equal size`.
`CheckSegLabels` sits right after `LoadAnnotations` and names the file instead; an image
without a label file (mmseg's `inference_model` runs the test pipeline without
`LoadAnnotations`) passes unchecked. Its number of
classes is the model's: the launcher (`peco_mm.supervisor.seg_classes`, for tools/train.py,
tools/test.py and tools/check_dataset.py) fills it in from `model.decode_head.num_classes`, so
a config that changes the head's classes checks against the new number.
"""
from __future__ import annotations

import numpy as np
from mmcv.transforms import BaseTransform

from ..registry import TRANSFORMS


@TRANSFORMS.register_module()
class CheckSegLabels(BaseTransform):
    """Raise ValueError naming the label file if `gt_seg_map` is not a single-channel map of
    its image's size (`ori_shape`, the image as read), or holds a value outside
    0..num_classes-1 other than `ignore_index` (values are checked after LoadAnnotations,
    i.e. after `reduce_zero_label`), or if the file is a 16-bit PNG with values above 255,
    which LoadAnnotations wraps modulo 256 (the file is decoded again only when its header
    says 16 bits). An image without a label file (`seg_map_path`), as mmseg's
    `inference_model` passes it, goes through unchecked.

    Args:
        num_classes: number of classes the head predicts; None (the shipped configs): the
            launcher sets it to `model.decode_head.num_classes`. Left None (a pipeline built
            by another tool, e.g. mmseg's own train script), only the range check is skipped:
            the map's shape and negative values are still checked.
        ignore_index: the label the loss ignores (mmseg: 255).
    """

    def __init__(self, num_classes: int | None = None, ignore_index: int = 255) -> None:
        if num_classes is not None and (not isinstance(num_classes, int) or num_classes <= 0):
            raise ValueError(f'CheckSegLabels: num_classes={num_classes!r}; allowed: an int > 0 '
                             '(or None: the model\'s decode_head.num_classes)')
        self.num_classes = num_classes
        self.ignore_index = ignore_index

    def transform(self, results: dict) -> dict:
        seg = results.get('gt_seg_map')
        if seg is None and 'seg_map_path' not in results:
            # an image without a label file: mmseg's `inference_model` runs the test pipeline
            # without LoadAnnotations; nothing to check
            return results
        if seg is None:  # a label file that was not loaded (yet)
            raise KeyError('CheckSegLabels needs `gt_seg_map`: put it after LoadAnnotations '
                           f'(got keys {sorted(results)})')
        seg = np.asarray(seg)  # (H, W) int
        img_shape = results.get('ori_shape') or np.shape(results.get('img'))[:2]
        problem = label_map_problem(seg.shape, img_shape)
        if problem:
            raise ValueError(f"{results.get('seg_map_path', '<unknown label file>')}: "
                             f"{problem} (image {results.get('img_path', '?')})")
        problem = (wide_file_problem(results.get('seg_map_path'))
                   or label_value_problem(seg, self.num_classes, self.ignore_index,
                                          results.get('reduce_zero_label')))
        if problem:
            raise ValueError(f"{results.get('seg_map_path', '<unknown label file>')}: {problem}")
        return results

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}(num_classes={self.num_classes}, '
                f'ignore_index={self.ignore_index})')


def label_map_problem(label_shape: tuple, img_shape: tuple | None) -> str | None:
    """Why a label map of `label_shape` cannot label an image of `img_shape` (H, W), or None.
    """
    if len(label_shape) != 2:
        channels = label_shape[2] if len(label_shape) == 3 else label_shape
        return (f'label map has {channels} channels (shape {tuple(label_shape)}); expected a '
                'single-channel PNG of class indices, not a colour (RGB) rendering')
    if not img_shape or len(img_shape) < 2:
        return None
    (h, w), (ih, iw) = label_shape, tuple(img_shape)[:2]
    if (h, w) == (ih, iw):
        return None
    kind = ('transposed' if (h, w) == (iw, ih) else
            'smaller than its image' if h <= ih and w <= iw else 'not the size of its image')
    return (f'label map is {h}x{w} (HxW) but its image is {ih}x{iw}: {kind}; expected one '
            'label per pixel')


def label_value_problem(seg: np.ndarray, num_classes: int | None, ignore_index: int = 255,
                        reduce_zero_label: bool | None = False) -> str | None:
    """Why a label map as LoadAnnotations gives it (after `reduce_zero_label`) holds values
    outside 0..num_classes-1 and `ignore_index`, or None (num_classes None: negatives only)."""
    bad = seg < 0
    if num_classes is not None:
        bad |= (seg >= num_classes) & (seg != ignore_index)
    if not bad.any():
        return None
    values = np.unique(seg[bad])
    shown = ', '.join(str(v) for v in values[:10]) + (' ...' if len(values) > 10 else '')
    allowed = f'0..{num_classes - 1}' if num_classes else 'values >= 0'
    return (f'label values [{shown}] are outside the {num_classes or "model"} classes '
            f'(allowed: {allowed} and ignore_index={ignore_index}'
            + (', after reduce_zero_label maps 0 -> ignore and k -> k-1' if reduce_zero_label
               else '')
            + '). Expected a single-channel PNG of class indices (ADE20K: 0 = other, '
            '1..150 = classes).')


def as_loaded(raw: np.ndarray, reduce_zero_label: bool | None) -> np.ndarray:
    """A label map as decoded from its file -> as mmseg's LoadAnnotations gives it (8 bits;
    with `reduce_zero_label`: 0 -> 255, k -> k-1)."""
    seg = raw.astype(np.uint8)
    if reduce_zero_label:
        seg = np.where(seg == 0, 255, seg - 1).astype(np.uint8)
        seg[seg == 254] = 255
    return seg


def wide_label_problem(raw: np.ndarray) -> str | None:
    """Why a label map decoded from its file (any bit depth) loses classes when read as 8
    bits, or None."""
    if raw.dtype.itemsize == 1 or raw.size == 0 or int(raw.max()) <= 255:
        return None
    top = int(raw.max())
    return (f'label map is {8 * raw.dtype.itemsize}-bit with values up to {top}: mmseg reads '
            f'label maps as 8 bits, so values above 255 wrap around ({top} is read as '
            f'{top % 256}); save class indices 0..255 in an 8-bit PNG')


def wide_file_problem(path) -> str | None:
    """`wide_label_problem` of a local 16-bit PNG file (read again only when its header says
    16 bits), else None."""
    try:
        with open(str(path), 'rb') as f:
            head = f.read(26)
    except (OSError, TypeError):  # not a local file: LoadAnnotations read it elsewhere
        return None
    if head[:8] != b'\x89PNG\r\n\x1a\n' or len(head) < 26 or head[24] != 16:
        return None
    import mmcv
    with open(str(path), 'rb') as f:
        return wide_label_problem(mmcv.imfrombytes(f.read(), flag='unchanged'))
