"""Image files for the tokenizer tools: find them, read them as RGB (grey / RGBA / palette
converted), resize the short side and centre-crop, and scale to the tokenizer's [-1, 1]."""
from __future__ import annotations

import os
import os.path as osp

import numpy as np
import torch

IMAGE_EXTS = ('.jpg', '.jpeg', '.png', '.bmp', '.webp', '.tif', '.tiff', '.ppm', '.pgm')


def find_images(root: str) -> list[str]:
    """Image files under `root` (recursively), sorted; an error when there are none."""
    if osp.isfile(root):
        return [root]
    if not osp.isdir(root):
        raise FileNotFoundError(f'{root!r} is neither an image file nor a folder')
    found = []
    for d, _, files in os.walk(root):
        found += [osp.join(d, f) for f in files if f.lower().endswith(IMAGE_EXTS)]
    if not found:
        raise FileNotFoundError(f'no images ({", ".join(IMAGE_EXTS)}) under {root!r}')
    return sorted(found)


def load_image(path: str, size: int) -> torch.Tensor:
    """(3, size, size) float in [-1, 1]: RGB, short side resized to `size`, centre crop."""
    from PIL import Image
    try:
        with Image.open(path) as im:
            im = im.convert('RGB')  # grey, RGBA, palette, CMYK -> RGB
            w, h = im.size
            s = size / min(w, h)
            im = im.resize((max(size, round(w * s)), max(size, round(h * s))),
                           Image.BICUBIC)
            w, h = im.size
            left, top = (w - size) // 2, (h - size) // 2
            im = im.crop((left, top, left + size, top + size))
            arr = np.asarray(im, dtype=np.float32)
    except (OSError, ValueError) as err:
        raise ValueError(f'cannot read image {path!r}: {err}') from err
    return torch.from_numpy(arr).permute(2, 0, 1) / 127.5 - 1.0
