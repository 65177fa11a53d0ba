"""Decode one image, label map or video and say what is wrong with it (tools/check_dataset.py).

Images are decoded twice: with mmcv (OpenCV, what LoadImageFromFile uses by default), and with
Pillow, which also notices a truncated JPEG that OpenCV pads with gray. Label maps are also
checked for values the model cannot learn (outside its classes, or above 255 in a 16-bit map,
which mmseg reads as 8 bits). Videos are opened with decord (what mmaction2's DecordInit
uses) and their first, middle and last frames decoded.
"""
from __future__ import annotations

import io
from typing import NamedTuple

import mmcv
import numpy as np

from ..datasets.seg_checks import (as_loaded, label_map_problem, label_value_problem,
                                   wide_label_problem)


class SegRule(NamedTuple):
    """How a label map's values are checked: the model's classes, the ignored value and
    whether LoadAnnotations reduces the zero label."""
    num_classes: int | None
    ignore_index: int = 255
    reduce_zero_label: bool = False


class Sample(NamedTuple):
    """The files of one sample (None where it has none) and its label maps' rule."""
    image: str | None = None
    label_map: str | None = None
    video: str | None = None
    seg_rule: SegRule | None = None


def read_bytes(path: str) -> tuple[bytes | None, str | None]:
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except OSError as e:
        return None, f'cannot be read ({e.strerror or e})'
    if not data:
        return None, 'empty file (0 bytes)'
    return data, None


def decode_problem(data: bytes, flag: str) -> tuple[np.ndarray | None, str | None]:
    """(decoded array, None) or (None, why not)."""
    from PIL import Image
    try:
        img = mmcv.imfrombytes(data, flag=flag)
    except Exception as e:  # noqa: BLE001 (OpenCV raises cv2.error)
        return None, f'cannot be decoded ({str(e).strip().splitlines()[-1]})'
    if img is None:
        return None, f'cannot be decoded as an image ({len(data)} bytes; corrupt or truncated)'
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
    except Exception as e:  # noqa: BLE001 (OSError: image file is truncated, ...)
        return None, f'corrupt or truncated ({e})'
    return img, None


def image_problem(path: str) -> tuple[str | None, tuple | None]:
    """(why the image is bad or None, its (H, W))."""
    data, problem = read_bytes(path)
    if problem:
        return problem, None
    img, problem = decode_problem(data, 'color')
    return problem, (None if img is None else img.shape[:2])


def label_problem(path: str, img_shape: tuple | None, rule: SegRule | None = None
                  ) -> str | None:
    """Why a segmentation label map is bad (unreadable, RGB, not its image's size, values
    wrapped by an 8-bit read or outside the classes of `rule`), or None."""
    data, problem = read_bytes(path)
    if problem:
        return problem
    seg, problem = decode_problem(data, 'unchanged')
    if problem:
        return problem
    seg = np.squeeze(seg)
    problem = label_map_problem(seg.shape, img_shape) or wide_label_problem(seg)
    if problem or rule is None:
        return problem
    return label_value_problem(as_loaded(seg, rule.reduce_zero_label), rule.num_classes,
                               rule.ignore_index, rule.reduce_zero_label)


def video_problem(path: str) -> str | None:
    """Why a video cannot be read (empty, not a video, no frames, a frame that does not
    decode), or None."""
    import os
    try:
        size = os.path.getsize(path)
    except OSError as e:
        return f'cannot be read ({e.strerror or e})'
    if not size:
        return 'empty file (0 bytes)'
    import decord
    try:
        reader = decord.VideoReader(path, num_threads=1)
        n = len(reader)
        if n == 0:
            return 'video has no frames'
        reader.get_batch(sorted({0, n // 2, n - 1})).asnumpy()
    except Exception as e:  # noqa: BLE001 (decord raises its own DECORDError / RuntimeError)
        why = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        return f'cannot be decoded as a video ({size} bytes; {why})'
    return None


def sample_problems(sample: Sample) -> list[tuple[str, str]]:
    """[(file, reason), ...] for one sample's image, label map and video."""
    out = []
    shape = None
    if sample.image:
        problem, shape = image_problem(sample.image)
        if problem:
            out.append((sample.image, problem))
    if sample.label_map:
        problem = label_problem(sample.label_map, shape, sample.seg_rule)
        if problem:
            out.append((sample.label_map, problem))
    if sample.video:
        problem = video_problem(sample.video)
        if problem:
            out.append((sample.video, problem))
    return out
