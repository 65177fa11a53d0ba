"""Decode one image or label file and say what is wrong with it (tools/check_dataset.py).

Images are decoded twice: with mmcv (OpenCV, what LoadImageFromFile uses by default), and with
Pillow, which also notices a truncated JPEG that OpenCV pads with gray.
"""
from __future__ import annotations

import io

import mmcv
import numpy as np

from .seg_checks import label_map_problem


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


def label_problem(path: str, img_shape: tuple | None) -> str | None:
    """Why a segmentation label map is bad (unreadable, RGB, not its image's size), or None."""
    data, problem = read_bytes(path)
    if problem:
        return problem
    seg, problem = decode_problem(data, 'unchanged')
    if problem:
        return problem
    return label_map_problem(np.squeeze(seg).shape, img_shape)


def sample_problems(sample: tuple[str | None, str | None]) -> list[tuple[str, str]]:
    """[(file, reason), ...] for one (image path, label path or None) pair."""
    img_path, seg_path = sample
    out = []
    shape = None
    if img_path:
        problem, shape = image_problem(img_path)
        if problem:
            out.append((img_path, problem))
    if seg_path:
        problem = label_problem(seg_path, shape)
        if problem:
            out.append((seg_path, problem))
    return out
