"""Images for the tools, the hooks and the demo, in one place: find and read image files,
normalise them the way a model's data preprocessor does, map model outputs back to uint8, and
lay batches out as PNG grids.

Normalisation is always `(pixel - mean) / std` on 0..255 RGB, as mmengine's data
preprocessors do it: the tokenizer's [-1, 1] range is `mean = std = 127.5` (`TOKENIZER_MEAN`,
`TOKENIZER_STD`, the defaults here), ImageNet normalisation is `IMAGENET_MEAN` /
`IMAGENET_STD`.
"""
from __future__ import annotations

import os.path as osp
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

IMAGE_EXTS = ('.jpg', '.jpeg', '.png', '.bmp', '.webp', '.tif', '.tiff', '.ppm', '.pgm')
TOKENIZER_MEAN = (127.5, 127.5, 127.5)  # [-1, 1]
TOKENIZER_STD = (127.5, 127.5, 127.5)
IMAGENET_MEAN = (123.675, 116.28, 103.53)  # 0..255 RGB, as mmpretrain's configs
IMAGENET_STD = (58.395, 57.12, 57.375)


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


# ---- normalisation ---------------------------------------------------------------------------
def _stats(v: Sequence[float], ref: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(v, dtype=torch.float32, device=ref.device).view(3, 1, 1)


def normalize(rgb: np.ndarray | torch.Tensor, mean: Sequence[float] = TOKENIZER_MEAN,
              std: Sequence[float] = TOKENIZER_STD) -> torch.Tensor:
    """uint8 RGB (H, W, 3) or (B, H, W, 3) -> float (3, H, W) / (B, 3, H, W), (x - mean) / std."""
    if isinstance(rgb, np.ndarray):  # torch warns on a read-only array (e.g. from PIL)
        rgb = np.require(rgb, requirements=('C', 'W'))
    x = torch.as_tensor(rgb).float()
    x = x.movedim(-1, -3)  # channels first
    return (x - _stats(mean, x)) / _stats(std, x)


def to_uint8(x: torch.Tensor, mean: Sequence[float] = TOKENIZER_MEAN,
             std: Sequence[float] = TOKENIZER_STD) -> np.ndarray:
    """The inverse of `normalize`: float (3, H, W) or (B, 3, H, W) -> uint8 RGB (H, W, 3) or
    (B, H, W, 3), clipped to 0..255."""
    x = x.detach().float().cpu()
    x = x * _stats(std, x) + _stats(mean, x)
    return x.round().clamp(0, 255).to(torch.uint8).movedim(-3, -1).numpy()


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


# ---- grids -----------------------------------------------------------------------------------
def image_grid(rows: Sequence[torch.Tensor | np.ndarray], pad: int = 2,
               mean: Sequence[float] = TOKENIZER_MEAN,
               std: Sequence[float] = TOKENIZER_STD) -> np.ndarray:
    """One grid row per batch, on a white background with `pad` pixels between images:
    each row is a normalised float (B, 3, H, W) tensor (mapped back with `to_uint8`) or a uint8
    (B, H, W, 3) array. Returns (R(H + pad) + pad, Bmax(W + pad) + pad, 3) uint8 RGB."""
    rows = [to_uint8(r, mean, std) if isinstance(r, torch.Tensor) else np.asarray(r, np.uint8)
            for r in rows]
    H, W = rows[0].shape[1:3]
    if any(r.shape[1:] != (H, W, 3) for r in rows):
        raise ValueError(f'image_grid: every image must be {H}x{W} RGB, got row shapes '
                         f'{[r.shape for r in rows]}')
    from torchvision.utils import make_grid
    cols = max(len(r) for r in rows)
    white = np.full((1, H, W, 3), 255, np.uint8)  # fills the end of a shorter row
    tiles = np.concatenate([np.concatenate([r] + [white] * (cols - len(r))) for r in rows])
    grid = make_grid(torch.from_numpy(tiles).permute(0, 3, 1, 2), nrow=cols, padding=pad,
                     pad_value=255)  # (3, R(H + pad) + pad, cols(W + pad) + pad)
    return grid.permute(1, 2, 0).numpy()


def side_by_side_grid(img: torch.Tensor, recon: torch.Tensor, pad: int = 2) -> np.ndarray:
    """(B, 3, H, W) originals and reconstructions in [-1, 1] -> uint8 grid, originals on the
    top row, reconstructions below (the reconstruction hook and visualize_reconstructions)."""
    return image_grid([img, recon], pad)


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
