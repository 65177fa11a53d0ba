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

`make_world` writes one world per seed (the study draws one per replicate). Its ten classes
are split by the seed into A (the labels a perceptual network may learn) and B (held out: every
evaluation is scored on them); the folders are those the host datasets read:

- `pretrain/train/unlabeled/*.png`: unlabeled images of all classes (no labels are kept) for
  MoCo v3, the tokenizers and MIM;
- `perceptual/{train,val}/<A class>/*.png`: the labelled split of A for a supervised
  perceptual network;
- `judge/train/<B class>/*.png`: the judge's own labelled split of B (a different network
  scores reconstructions: Table 4's second column);
- `cls/{train,val,test}/<B class>/*.png`: the few-label split, a tuning half (`val`) and a
  held-out test half (`test`; mmpretrain CustomDataset / ImageNet folder layout);
- `ade/ADEChallengeData2016/{images,annotations}/{training,validation,test}/*.png`: per-pixel
  masks of B (1 = background, 2 + k = the k-th B class; 0 is never used, so mmseg's
  reduce_zero_label maps them to 0 = background, 1.. = the classes);
- `pretrain_pairs/{a,b}/unlabeled/*.png` (when asked for): unlabeled geometry-matched pairs of all
  classes under the training nuisances, the positive pairs of a self-supervised perceptual
  network (`GeometryPairViews`);
- `pairs/{a,b}/*.png`: geometry-matched pairs of B (one shape at one pose drawn under two
  independent nuisances, from held-out backgrounds and hues no other split draws);
- `classes.json`: {"A": [...], "B": [...]}.

Every split has its own seed stream: the same arguments write the same bytes.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

CLASSES = ('circle', 'square', 'triangle', 'cross', 'ring', 'star', 'bars', 'ell', 'arrow',
           'frame')
SEG_CLASSES = ('background', ) + CLASSES  # after reduce_zero_label
SUPERSAMPLE = 4
SPLIT_SEEDS = dict(pretrain=1, judge=2, classes=3, cls_train=4, cls_val=5, ade_training=6,
                   ade_validation=7, cls_test=8, ade_test=9, perceptual_train=10,
                   perceptual_val=11, pairs=12, train_pairs=13)


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
    if kind == 'rings':  # held out: concentric rings around a random centre
        r = np.hypot(xx - rng.uniform(0, 1), yy - rng.uniform(0, 1))
        return (np.sin(2 * np.pi * r / rng.uniform(0.1, 0.25)) > 0).astype(np.float32)
    if kind == 'dots':  # held out: a grid of round dots
        n = int(rng.integers(3, 6))
        fx, fy = (xx * n) % 1 - 0.5, (yy * n) % 1 - 0.5
        return (np.hypot(fx, fy) < rng.uniform(0.2, 0.4)).astype(np.float32)
    raise ValueError(kind)


# the nuisances training and evaluation images draw, and those only the geometry-matched
# pairs draw (held out: no network of the study ever saw them)
BACKGROUNDS = ('flat', 'gradient', 'stripes', 'blobs', 'checker')
HELD_OUT_BACKGROUNDS = ('rings', 'dots')
SURFACES = ('flat', 'flat', 'stripes', 'noise')
HELD_OUT_HUES = (0.45, 0.62)  # cyan to blue: a sixth of the hue circle


def _colour(rng: np.random.Generator, bright: bool, held_out: bool = False) -> np.ndarray:
    """A random RGB colour in [0, 1] with luma in the bright or the dark half, its hue inside
    HELD_OUT_HUES (held_out=True) or outside it (a grey counts as outside)."""
    import colorsys
    while True:
        c = rng.uniform(0, 1, 3)
        luma = float(c @ (0.299, 0.587, 0.114))
        target = rng.uniform(0.62, 0.92) if bright else rng.uniform(0.06, 0.36)
        c = np.clip(c * target / max(luma, 1e-3), 0, 1).astype(np.float32)
        hue, _, sat = colorsys.rgb_to_hsv(*map(float, c))
        inside = sat > 0.05 and HELD_OUT_HUES[0] <= hue < HELD_OUT_HUES[1]
        if inside == held_out:
            return c


def draw_nuisance(rng: np.random.Generator, size: int, held_out: bool = False) -> dict:
    """Everything of an image but the object's geometry: the background and the object's
    surface (each (size, size, 3) in [0, 1]), the lighting (gain, shading ramp) and the
    sensor noise. held_out=True draws the held-out backgrounds and hues."""
    fg_bright = bool(rng.integers(0, 2))
    kinds = HELD_OUT_BACKGROUNDS if held_out else BACKGROUNDS
    bg = _pattern(rng, size, kinds[int(rng.integers(0, len(kinds)))])[..., None]
    b0, b1 = (_colour(rng, not fg_bright, held_out) for _ in range(2))
    surf = _pattern(rng, size, SURFACES[int(rng.integers(0, len(SURFACES)))])[..., None]
    f0, f1 = (_colour(rng, fg_bright, held_out) for _ in range(2))
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size - 0.5
    a = rng.uniform(0, 2 * np.pi)
    shade = 1 + rng.uniform(0, 0.5) * (xx * np.cos(a) + yy * np.sin(a))
    gain = rng.uniform(0.75, 1.2)
    noise = rng.normal(0, rng.uniform(0, 0.03), (size, size, 3))
    return dict(background=(1 - bg) * b0 + bg * b1, surface=(1 - surf) * f0 + surf * f1,
                light=gain * shade[..., None], noise=noise)


def draw_geometry(rng: np.random.Generator, size: int) -> dict:
    """The object's pose: radius, centre (pixels) and angle (radians)."""
    radius = rng.uniform(0.25, 0.42) * size
    margin = radius * 0.8
    cx, cy = rng.uniform(margin, size - margin, 2)
    return dict(radius=radius, cx=cx, cy=cy, angle=rng.uniform(0, 2 * np.pi))


def compose(label: int, geometry: dict, nuisance: dict, rotate: bool = True
            ) -> tuple[np.ndarray, np.ndarray]:
    """The image of shape CLASSES[label] at `geometry` under `nuisance`: ((size, size, 3)
    uint8 RGB, (size, size) bool object mask)."""
    g = geometry
    size = nuisance['background'].shape[0]
    alpha = shape_alpha(CLASSES[label], size, g['cx'], g['cy'], g['radius'],
                        g['angle'] if rotate else 0.0)[..., None]
    img = (1 - alpha) * nuisance['background'] + alpha * nuisance['surface']
    img = img * nuisance['light'] + nuisance['noise']
    return (img.clip(0, 1) * 255 + 0.5).astype(np.uint8), alpha[..., 0] > 0.5


def render(rng: np.random.Generator, size: int, label: int, rotate: bool = True,
           held_out: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """One image of class `label`: ((size, size, 3) uint8 RGB, (size, size) bool object mask).
    rotate=False draws the shape upright; the angle is still drawn from `rng`, so the rest of
    the world stays the same image for image."""
    nuisance = draw_nuisance(rng, size, held_out)
    return compose(label, draw_geometry(rng, size), nuisance, rotate)


# ---- folders -----------------------------------------------------------------------------------
def split_classes(seed: int, held_out: int = 5) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(A, B): the classes a perceptual network may learn the labels of, and the `held_out`
    classes every evaluation is scored on, drawn by `seed` (each in CLASSES' order)."""
    if not 1 <= held_out < len(CLASSES):
        raise ValueError(f'held_out={held_out} classes: expected 1 to {len(CLASSES) - 1}')
    order = np.random.default_rng(SPLIT_SEEDS['classes'] + 1000 * seed).permutation(
        len(CLASSES))
    b = set(order[:held_out].tolist())
    return (tuple(c for i, c in enumerate(CLASSES) if i not in b),
            tuple(c for i, c in enumerate(CLASSES) if i in b))


def _labels(rng: np.random.Generator, n: int, per_class: int | None,
            classes: tuple[str, ...] = CLASSES) -> np.ndarray:
    """CLASSES indices: `per_class` of each of `classes`, or n drawn uniformly from them."""
    idx = np.array([CLASSES.index(c) for c in classes])
    if per_class is not None:
        return np.repeat(idx, per_class)
    return idx[rng.integers(0, len(idx), n)]


def write_class_folder(root: Path, per_class: int, size: int, seed: int, rotate: bool = True,
                       classes: tuple[str, ...] = CLASSES) -> Path:
    """root/<class>/NNNN.png, `per_class` images of each of `classes`."""
    rng = np.random.default_rng(seed)
    for i, label in enumerate(_labels(rng, 0, per_class, classes)):
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
              rotate: bool = True, classes: tuple[str, ...] = CLASSES) -> Path:
    """ADEChallengeData2016 layout: images/<split>/*.png and annotations/<split>/*.png with
    1 = background and 2 + k on the pixels of an object of classes[k]."""
    rng = np.random.default_rng(seed)
    (root / 'images' / split).mkdir(parents=True, exist_ok=True)
    (root / 'annotations' / split).mkdir(parents=True, exist_ok=True)
    for i, label in enumerate(_labels(rng, 0, per_class, classes)):
        img, mask = render(rng, size, int(label), rotate)
        seg = np.where(mask, 2 + classes.index(CLASSES[label]), 1).astype(np.uint8)
        Image.fromarray(img).save(root / 'images' / split / f'ADE_{split}_{i:05d}.png')
        Image.fromarray(seg).save(root / 'annotations' / split / f'ADE_{split}_{i:05d}.png')
    return root


def write_pairs(root: Path, n: int, size: int, seed: int, rotate: bool = True,
                classes: tuple[str, ...] = CLASSES, held_out: bool = True,
                inner: str = '') -> Path:
    """root/{a,b}/[inner/]NNNNN.png: n geometry-matched pairs, one shape of `classes` at one
    pose drawn twice under two independent nuisances (background, colours, surface,
    lighting, noise), from the held-out ones (held_out=True) or the training ones."""
    rng = np.random.default_rng(seed)
    for side in 'ab':
        (root / side / inner).mkdir(parents=True, exist_ok=True)
    for i, label in enumerate(_labels(rng, n, None, classes)):
        geometry = draw_geometry(rng, size)
        for side in 'ab':
            img, _ = compose(int(label), geometry, draw_nuisance(rng, size, held_out),
                             rotate)
            Image.fromarray(img).save(root / side / inner / f'{i:05d}.png')
    return root


def make_world(root: str | Path, n_pretrain: int = 20000, size: int = 32, per_class: int = 10,
               val_per_class: int = 30, judge_per_class: int = 100, seed: int = 0,
               rotate: bool = True, held_out: int = 5, n_pairs: int = 200,
               n_train_pairs: int = 0) -> dict:
    """Every split of one world under root (see the module docstring), all drawn from `seed`
    (class split included). `per_class` labelled images per held-out class for few-label
    fine-tuning and segmentation; `val_per_class` for each of their tuning and test halves;
    `judge_per_class` per class for the perceptual network's labelled split (classes A) and
    for the judge's (classes B); `n_pairs` geometry-matched pairs of B classes.
    rotate=False draws every shape upright (MoCo v3's augmentations do not change rotation,
    so a per-image angle lets its views be told apart without the shape). `n_train_pairs`
    pairs of all classes under the training nuisances (`pretrain_pairs/{a,b}`, unlabeled)
    are the positive pairs of a self-supervised perceptual network."""
    if n_train_pairs < 0:
        raise ValueError(f'make_world: n_train_pairs={n_train_pairs} must be >= 0')
    for key, v in dict(n_pretrain=n_pretrain, size=size, per_class=per_class,
                       val_per_class=val_per_class, judge_per_class=judge_per_class,
                       n_pairs=n_pairs).items():
        if int(v) < 1:
            raise ValueError(f'make_world: {key}={v} must be >= 1')
    if size < 16:
        raise ValueError(f'make_world: size={size} px is too small to draw the shapes (>= 16)')
    root = Path(root)
    a, b = split_classes(seed, held_out)
    s = {k: v + 1000 * seed for k, v in SPLIT_SEEDS.items()}
    ade = root / 'ade' / 'ADEChallengeData2016'
    write_unlabeled(root / 'pretrain' / 'train' / 'unlabeled', n_pretrain, size, s['pretrain'],
                    rotate)
    for split, n in (('train', judge_per_class), ('val', val_per_class)):
        write_class_folder(root / 'perceptual' / split, n, size, s[f'perceptual_{split}'],
                           rotate, a)
    write_class_folder(root / 'judge' / 'train', judge_per_class, size, s['judge'], rotate, b)
    for split, n in (('train', per_class), ('val', val_per_class), ('test', val_per_class)):
        write_class_folder(root / 'cls' / split, n, size, s[f'cls_{split}'], rotate, b)
    for split, n in (('training', per_class), ('validation', val_per_class),
                     ('test', val_per_class)):
        write_ade(ade, split, n, size, s[f'ade_{split}'], rotate, b)
    write_pairs(root / 'pairs', n_pairs, size, s['pairs'], rotate, b)
    if n_train_pairs:
        write_pairs(root / 'pretrain_pairs', n_train_pairs, size, s['train_pairs'], rotate,
                    CLASSES, held_out=False, inner='unlabeled')
    (root / 'classes.json').write_text(json.dumps(dict(A=list(a), B=list(b)), indent=1))
    return dict(pretrain=root / 'pretrain', perceptual=root / 'perceptual',
                judge=root / 'judge', cls=root / 'cls', ade=ade, pairs=root / 'pairs',
                classes=dict(A=a, B=b))


def read_classes(world: str | Path) -> dict[str, tuple[str, ...]]:
    """{'A': ..., 'B': ...} of a world `make_world` wrote (its classes.json)."""
    path = Path(world) / 'classes.json'
    try:
        data = json.loads(path.read_text())
        out = {k: tuple(data[k]) for k in ('A', 'B')}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f'{path}: expected {{"A": [...], "B": [...]}} of shape classes '
                         f'({err})') from None
    unknown = [c for c in out['A'] + out['B'] if c not in CLASSES]
    if unknown or set(out['A']) & set(out['B']):
        raise ValueError(f'{path}: classes {unknown or sorted(set(out["A"]) & set(out["B"]))}'
                         f' are unknown or in both A and B; known: {CLASSES}')
    return out
