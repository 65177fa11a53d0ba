"""A designed image world for the study (tools/study.py) and `make demo`; nothing is downloaded.

Each image holds one object whose CLASS is its shape and structure (ten shapes: `CLASSES`).
Everything else is a nuisance drawn at random per image, and a pixel loss has to spend its
codes on all of it:

- background: flat, a linear gradient, stripes (random angle and period), soft blobs or a
  checkerboard, in two random colours;
- object surface: a random colour, flat or with stripes / noise of a second colour;
- geometry: position, scale (radius 25-42 % of the image) and rotation (`rotate=False`: upright);
- lighting: a global gain, a linear shading ramp in a random direction, sensor noise.

Foreground and background sit on opposite sides of a brightness split, so the shape is always
visible. A self-supervised network trained with colour jitter, grey-scale and crops (MoCo v3)
is pushed to ignore exactly the colour, texture and lighting factors; what stays constant
across two views is the shape. The thesis under test (PeCo Sec. 3.2): a perceptual loss in
that network's feature space carries these invariances into the codebook, while a pixel loss
rewards codes that copy colours and textures.

`make_world` writes the folders the host datasets read:

- `pretrain/train/unlabeled/*.png`: unlabeled images for MoCo v3, the tokenizers and MIM;
- `judge/train/<class>/*.png`: a larger labelled set of clean images for the supervised
  classifier that scores reconstructions (Table 4's second column), tested on `cls/val`;
- `cls/{train,val}/<class>/*.png`: the few-label split (mmpretrain CustomDataset / ImageNet
  folder layout); `cls/val` is also the tokenizers' labelled test set;
- `ade/ADEChallengeData2016/{images,annotations}/{training,validation}/*.png`: per-pixel
  masks (1 = background, 2..11 = the classes; 0 is never used, so mmseg's
  reduce_zero_label maps them to 0 = background, 1..10 = the classes).

Every split has its own seed stream: the same arguments write the same bytes.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

CLASSES = ('circle', 'square', 'triangle', 'cross', 'ring', 'star', 'bars', 'ell', 'arrow',
           'frame')
SEG_CLASSES = ('background', ) + CLASSES  # after reduce_zero_label
SUPERSAMPLE = 4
SPLIT_SEEDS = dict(pretrain=1, judge=2, cls_train=4, cls_val=5, ade_train=6, ade_val=7)


# ---- shapes: polygons in unit coordinates (radius ~1), fill 1 = object, 0 = hole ------------
def _circle(r: float = 1.0, n: int = 48) -> np.ndarray:
    a = np.linspace(0, 2 * np.pi, n, endpoint=False)
    return np.stack([r * np.cos(a), r * np.sin(a)], 1)


def _rect(x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], float)


def _star(points: int = 5, inner: float = 0.42) -> np.ndarray:
    a = np.linspace(0, 2 * np.pi, 2 * points, endpoint=False) - np.pi / 2
    r = np.where(np.arange(2 * points) % 2 == 0, 1.0, inner)
    return np.stack([r * np.cos(a), r * np.sin(a)], 1)


SHAPES: dict[str, list[tuple[np.ndarray, int]]] = {
    'circle': [(_circle(0.9), 1)],
    'square': [(_rect(-0.75, -0.75, 0.75, 0.75), 1)],
    'triangle': [(np.array([[0, -1.0], [0.95, 0.7], [-0.95, 0.7]]), 1)],
    'cross': [(_rect(-0.95, -0.3, 0.95, 0.3), 1), (_rect(-0.3, -0.95, 0.3, 0.95), 1)],
    'ring': [(_circle(0.95), 1), (_circle(0.55), 0)],
    'star': [(_star(), 1)],
    'bars': [(_rect(-0.9, -0.9, -0.3, 0.9), 1), (_rect(0.3, -0.9, 0.9, 0.9), 1)],
    'ell': [(_rect(-0.8, -0.9, -0.2, 0.9), 1), (_rect(-0.8, 0.3, 0.8, 0.9), 1)],
    'arrow': [(_rect(-0.95, -0.22, 0.2, 0.22), 1),
              (np.array([[0.1, -0.75], [0.95, 0.0], [0.1, 0.75]]), 1)],
    'frame': [(_rect(-0.85, -0.85, 0.85, 0.85), 1), (_rect(-0.45, -0.45, 0.45, 0.45), 0)],
}
assert tuple(SHAPES) == CLASSES


def shape_alpha(name: str, size: int, cx: float, cy: float, radius: float, angle: float
                ) -> np.ndarray:
    """(size, size) float32 coverage in [0, 1] of shape `name` centred at (cx, cy) pixels,
    `radius` pixels, rotated by `angle` radians; anti-aliased by supersampling."""
    if name not in SHAPES:
        raise ValueError(f'shape {name!r}; known: {CLASSES}')
    s = SUPERSAMPLE
    canvas = Image.new('L', (size * s, size * s), 0)
    draw = ImageDraw.Draw(canvas)
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    for poly, fill in SHAPES[name]:
        pts = (poly @ rot.T) * radius + (cx, cy)
        draw.polygon([(float(x * s), float(y * s)) for x, y in pts], fill=255 * fill)
    a = np.asarray(canvas, np.float32).reshape(size, s, size, s).mean((1, 3))
    return a / 255.0


# ---- nuisances ---------------------------------------------------------------------------------
def _pattern(rng: np.random.Generator, size: int, kind: str) -> np.ndarray:
    """(size, size) mixing weights in [0, 1] of a background / surface pattern."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    a = rng.uniform(0, np.pi)
    u = xx * np.cos(a) + yy * np.sin(a)
    if kind == 'flat':
        return np.zeros((size, size), np.float32)
    if kind == 'gradient':
        return (u - u.min()) / max(float(np.ptp(u)), 1e-6)
    if kind == 'stripes':
        period = rng.uniform(0.12, 0.35)
        return (np.sin(2 * np.pi * u / period + rng.uniform(0, 2 * np.pi)) > 0).astype(
            np.float32)
    if kind == 'blobs':
        g = rng.uniform(0, 1, (4, 4)).astype(np.float32)
        return np.asarray(Image.fromarray(g).resize((size, size), Image.BICUBIC)).clip(0, 1)
    if kind == 'checker':
        n = int(rng.integers(3, 7))
        return ((np.floor(xx * n) + np.floor(yy * n)) % 2).astype(np.float32)
    if kind == 'noise':
        return rng.uniform(0, 1, (size, size)).astype(np.float32)
    raise ValueError(kind)


BACKGROUNDS = ('flat', 'gradient', 'stripes', 'blobs', 'checker')
SURFACES = ('flat', 'flat', 'stripes', 'noise')


def _colour(rng: np.random.Generator, bright: bool) -> np.ndarray:
    """A random RGB colour in [0, 1] with luma in the bright or the dark half."""
    c = rng.uniform(0, 1, 3)
    luma = float(c @ (0.299, 0.587, 0.114))
    target = rng.uniform(0.62, 0.92) if bright else rng.uniform(0.06, 0.36)
    c = c * target / max(luma, 1e-3)
    return np.clip(c, 0, 1).astype(np.float32)


def render(rng: np.random.Generator, size: int, label: int, rotate: bool = True
           ) -> tuple[np.ndarray, np.ndarray]:
    """One image of class `label`: ((size, size, 3) uint8 RGB, (size, size) bool object mask).
    rotate=False draws the shape upright; the angle is still drawn from `rng`, so the rest of
    the world stays the same image for image."""
    fg_bright = bool(rng.integers(0, 2))
    bg = _pattern(rng, size, BACKGROUNDS[int(rng.integers(0, len(BACKGROUNDS)))])[..., None]
    b0, b1 = _colour(rng, not fg_bright), _colour(rng, not fg_bright)
    img = (1 - bg) * b0 + bg * b1  # (size, size, 3)
    surf = _pattern(rng, size, SURFACES[int(rng.integers(0, len(SURFACES)))])[..., None]
    f0, f1 = _colour(rng, fg_bright), _colour(rng, fg_bright)
    fg = (1 - surf) * f0 + surf * f1
    radius = rng.uniform(0.25, 0.42) * size
    margin = radius * 0.8
    cx, cy = rng.uniform(margin, size - margin, 2)
    angle = rng.uniform(0, 2 * np.pi)
    alpha = shape_alpha(CLASSES[label], size, cx, cy, radius, angle if rotate else 0.0)
    img = (1 - alpha[..., None]) * img + alpha[..., None] * fg
    # lighting: gain x linear shading ramp, then sensor noise
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size - 0.5
    a = rng.uniform(0, 2 * np.pi)
    shade = 1 + rng.uniform(0, 0.5) * (xx * np.cos(a) + yy * np.sin(a))
    img = img * rng.uniform(0.75, 1.2) * shade[..., None]
    img = img + rng.normal(0, rng.uniform(0, 0.03), img.shape)
    return (img.clip(0, 1) * 255 + 0.5).astype(np.uint8), alpha > 0.5


# ---- folders -----------------------------------------------------------------------------------
def _labels(rng: np.random.Generator, n: int, per_class: int | None) -> np.ndarray:
    if per_class is not None:
        return np.repeat(np.arange(len(CLASSES)), per_class)
    return rng.integers(0, len(CLASSES), n)


def write_class_folder(root: Path, per_class: int, size: int, seed: int, rotate: bool = True
                       ) -> Path:
    """root/<class>/NNNN.png, `per_class` images each."""
    rng = np.random.default_rng(seed)
    for i, label in enumerate(_labels(rng, 0, per_class)):
        d = root / CLASSES[label]
        d.mkdir(parents=True, exist_ok=True)
        img, _ = render(rng, size, int(label), rotate)
        Image.fromarray(img).save(d / f'{i:05d}.png')
    return root


def write_unlabeled(root: Path, n: int, size: int, seed: int, rotate: bool = True) -> Path:
    """root/NNNNN.png, classes drawn uniformly (their labels are not kept)."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for i, label in enumerate(_labels(rng, n, None)):
        img, _ = render(rng, size, int(label), rotate)
        Image.fromarray(img).save(root / f'{i:05d}.png')
    return root


def write_ade(root: Path, split: str, per_class: int, size: int, seed: int,
              rotate: bool = True) -> Path:
    """ADEChallengeData2016 layout: images/<split>/*.png and annotations/<split>/*.png with
    1 = background and 2 + class on the object's pixels."""
    rng = np.random.default_rng(seed)
    (root / 'images' / split).mkdir(parents=True, exist_ok=True)
    (root / 'annotations' / split).mkdir(parents=True, exist_ok=True)
    for i, label in enumerate(_labels(rng, 0, per_class)):
        img, mask = render(rng, size, int(label), rotate)
        seg = np.where(mask, 2 + int(label), 1).astype(np.uint8)
        Image.fromarray(img).save(root / 'images' / split / f'ADE_{split}_{i:05d}.png')
        Image.fromarray(seg).save(root / 'annotations' / split / f'ADE_{split}_{i:05d}.png')
    return root


def make_world(root: str | Path, n_pretrain: int = 20000, size: int = 32, per_class: int = 10,
               val_per_class: int = 30, judge_per_class: int = 100, seed: int = 0,
               rotate: bool = True) -> dict[str, Path]:
    """Every split of the world under root (see the module docstring). `per_class` labelled
    images per class for few-label fine-tuning and segmentation; `val_per_class` for their
    validation and the tokenizers' test; `judge_per_class` for the clean-image classifier.
    rotate=False draws every shape upright (MoCo v3's augmentations do not change rotation,
    so a per-image angle lets its views be told apart without the shape)."""
    for key, v in dict(n_pretrain=n_pretrain, size=size, per_class=per_class,
                       val_per_class=val_per_class, judge_per_class=judge_per_class).items():
        if int(v) < 1:
            raise ValueError(f'make_world: {key}={v} must be >= 1')
    if size < 16:
        raise ValueError(f'make_world: size={size} px is too small to draw the shapes (>= 16)')
    root = Path(root)
    s = {k: v + 1000 * seed for k, v in SPLIT_SEEDS.items()}
    ade = root / 'ade' / 'ADEChallengeData2016'
    write_unlabeled(root / 'pretrain' / 'train' / 'unlabeled', n_pretrain, size, s['pretrain'],
                    rotate)
    write_class_folder(root / 'judge' / 'train', judge_per_class, size, s['judge'], rotate)
    write_class_folder(root / 'cls' / 'train', per_class, size, s['cls_train'], rotate)
    write_class_folder(root / 'cls' / 'val', val_per_class, size, s['cls_val'], rotate)
    write_ade(ade, 'training', per_class, size, s['ade_train'], rotate)
    write_ade(ade, 'validation', val_per_class, size, s['ade_val'], rotate)
    return dict(pretrain=root / 'pretrain', judge=root / 'judge', cls=root / 'cls', ade=ade)
