"""Image files for the tools and the study: find and read them as training decodes them,
normalise them the way a model's data preprocessor does, and write PNGs.

Normalisation is always `(pixel - mean) / std` on 0..255 RGB, as mmengine's data
preprocessors do it: the tokenizer's [-1, 1] range is `mean = std = 127.5` (the defaults
here), ImageNet normalisation is `IMAGENET_MEAN` / `IMAGENET_STD` (peco_mm/utils/image.py).
"""
from __future__ import annotations

import os.path as osp
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..utils.image import TOKENIZER_MEAN, TOKENIZER_STD, channel_stats

IMAGE_EXTS = ('.jpg', '.jpeg', '.png', '.bmp', '.webp', '.tif', '.tiff', '.ppm', '.pgm')


# ---- files -----------------------------------------------------------------------------------
def find_images(root: str | Path) -> list[str]:
    """Image files under `root` (recursively), sorted; `root` itself if it is a file; an error
    when there are none."""
    root = str(root)
    if osp.isfile(root):
        return [root]
    if not osp.isdir(root):
        raise FileNotFoundError(f'{root!r} is neither an image file nor a folder')
    from mmengine.utils import scandir
    found = [osp.join(root, f)
             for f in scandir(root, IMAGE_EXTS, recursive=True, case_sensitive=False)]
    if not found:
        raise FileNotFoundError(f'no images ({", ".join(IMAGE_EXTS)}) under {root!r}')
    return sorted(found)


def read_rgb(path: str | Path, size: int | None = None) -> np.ndarray:
    """(H, W, 3) uint8 RGB, decoded as training decodes it (mmcv's `LoadImageFromFile`
    defaults: mmengine's file backend, `mmcv.imfrombytes(flag='color', backend='cv2')`), so a
    tool sees the pixels the model was trained on: grey and palette images as RGB, alpha
    dropped, 16-bit images scaled to 8 bits (value / 256), not clipped. With `size`: the short
    side resized to `size` (bicubic) and the centre `size` x `size` crop."""
    import mmcv
    from mmengine import fileio
    from PIL import Image
    try:
        data = fileio.get(str(path))
        img = mmcv.imfrombytes(data, flag='color', channel_order='rgb', backend='cv2') \
            if data else None
    except Exception as err:  # noqa: BLE001 (OSError, cv2.error)
        raise ValueError(f'cannot read image {str(path)!r}: {err}') from err
    if img is None:
        raise ValueError(f'cannot read image {str(path)!r}: not a decodable image '
                         f'({len(data or b"")} bytes)')
    if size is None:
        return img
    im = Image.fromarray(img)
    w, h = im.size
    s = size / min(w, h)
    im = im.resize((max(size, round(w * s)), max(size, round(h * s))), Image.BICUBIC)
    left, top = (im.size[0] - size) // 2, (im.size[1] - size) // 2
    return np.asarray(im.crop((left, top, left + size, top + size)))


def normalize(rgb: np.ndarray | torch.Tensor, mean: Sequence[float] = TOKENIZER_MEAN,
              std: Sequence[float] = TOKENIZER_STD) -> torch.Tensor:
    """uint8 RGB (H, W, 3) or (B, H, W, 3) -> float (3, H, W) / (B, 3, H, W), (x - mean) / std."""
    if isinstance(rgb, np.ndarray):  # torch warns on a read-only array (e.g. from PIL)
        rgb = np.require(rgb, requirements=('C', 'W'))
    x = torch.as_tensor(rgb).float()
    x = x.movedim(-1, -3)  # channels first
    return (x - channel_stats(mean, x)) / channel_stats(std, x)


def load_image(path: str | Path, size: int, mean: Sequence[float] = TOKENIZER_MEAN,
               std: Sequence[float] = TOKENIZER_STD) -> torch.Tensor:
    """(3, size, size) float: `read_rgb(path, size)` normalised (default: the tokenizer's
    [-1, 1])."""
    return normalize(read_rgb(path, size), mean, std)


def load_images(paths: Sequence[str | Path], size: int | None = None,
                mean: Sequence[float] = TOKENIZER_MEAN,
                std: Sequence[float] = TOKENIZER_STD) -> torch.Tensor:
    """(B, 3, H, W) float from image files of one size (or resized and cropped to `size`)."""
    return normalize(np.stack([read_rgb(p, size) for p in paths]), mean, std)


def save_png(array: np.ndarray, path: str | Path, scale: int = 1) -> Path:
    """Write (H, W, 3) uint8 RGB as PNG (nearest-neighbour upscaled by `scale`), making
    folders."""
    import mmcv
    if scale != 1:
        array = mmcv.imrescale(array, scale, interpolation='nearest')
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not mmcv.imwrite(np.ascontiguousarray(array[..., ::-1]), str(path)):
        raise OSError(f'could not write {str(path)!r}')
    return path
