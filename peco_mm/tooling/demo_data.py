"""Deterministic data for the toy configs of configs/demo/ and the tests; nothing is
downloaded (`make demo` runs on the shape world of `shape_world` instead).

- `make_class_folder`: a learnable synthetic ImageNet-style folder (tests, toy classifier).
- `make_photo_folder`: crops of the colour photos scikit-image ships (`skimage/data/*.png`)
  in the ImageNet folder layout `<root>/{train,val}/<photo>/*.png`: training crops from
  `TRAIN_PHOTOS`, evaluation crops from the held-out `HELD_OUT_PHOTOS` (never seen in training).
- `make_ade` / `make_coco`: a labelled set of flat-coloured shapes on a background, in the
  ADEChallengeData2016 layout (single-channel PNG label maps, 0 = "other") and the COCO layout
  (instances JSON with polygons). The background is gray noise (`backgrounds=None`, the dense
  tests) or crops of the photos (`make_demo_data`).

Every generator takes a seed and writes the same bytes for the same arguments.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw

# colour photos shipped inside scikit-image's wheel (grey ones are kept out: the tokenizer
# and MoCo v3 colour augmentations want colour)
TRAIN_PHOTOS = ('astronaut', 'motorcycle_left', 'motorcycle_right', 'hubble_deep_field',
                'retina', 'ihc')
HELD_OUT_PHOTOS = ('chelsea', 'rocket', 'coffee')
# class k (1-based, ADE numbering: 0 = "other") is painted in COLOURS[k - 1]
COLOURS = [(220, 30, 30), (30, 200, 40), (40, 60, 230)]
COCO_CATS = [dict(id=1, name='person'), dict(id=2, name='bicycle'), dict(id=3, name='car')]


def make_class_folder(root: str | Path, classes=('red', 'green', 'blue'), per_class: int = 6,
                      size: int = 32, seed: int = 0) -> Path:
    """ImageNet-style folder root/<class>/*.png. Class c is noise dominated by channel c with
    a bright square at a class-specific place, so a tiny model can learn it in a few steps."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    for c, name in enumerate(classes):
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            img = rng.integers(0, 80, (size, size, 3)).astype(np.uint8)
            img[..., c % 3] += 120
            o = (c * size // (len(classes) + 1)) % (size - 8)
            img[o:o + 8, o:o + 8] = 250
            Image.fromarray(img).save(d / f'{i}.png')
    return root


# ---- photos ---------------------------------------------------------------------------------
def skimage_photo_dir() -> Path:
    try:
        import skimage
    except ImportError as err:  # pragma: no cover - scikit-image is a dependency
        raise ImportError('the demo photos come from scikit-image (pip install scikit-image)'
                          ) from err
    return Path(skimage.__file__).parent / 'data'


def load_photo(name: str) -> np.ndarray:
    """(H, W, 3) uint8 RGB of a photo bundled with scikit-image (png or jpg)."""
    d = skimage_photo_dir()
    files = [p for p in (d / f'{name}.png', d / f'{name}.jpg') if p.is_file()]
    if not files:
        avail = sorted(p.stem for p in d.glob('*.*') if p.suffix in ('.png', '.jpg'))
        raise FileNotFoundError(f'photo {name!r} not in {d}; available: {avail}')
    return np.asarray(Image.open(files[0]).convert('RGB'))


def available_photos(names: Sequence[str]) -> list[str]:
    """The names among `names` that this scikit-image ships (releases differ slightly)."""
    d = skimage_photo_dir()
    return [n for n in names if (d / f'{n}.png').is_file() or (d / f'{n}.jpg').is_file()]


def random_crop(rng: np.random.Generator, photo: np.ndarray, out_hw: tuple[int, int],
                scale: tuple[float, float] = (0.1, 0.6)) -> np.ndarray:
    """A random square-ish region covering `scale` of the photo's short side², resized."""
    h, w = photo.shape[:2]
    side = int(min(h, w) * np.sqrt(rng.uniform(*scale)))
    ch = side
    cw = min(w, int(side * out_hw[1] / out_hw[0]))
    y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
    crop = Image.fromarray(photo[y:y + ch, x:x + cw])
    return np.asarray(crop.resize((out_hw[1], out_hw[0]), Image.BICUBIC))


def make_photo_folder(root: str | Path, size: int = 64, train_per_photo: int = 48,
                      val_per_photo: int = 24, seed: int = 0,
                      train_photos: Sequence[str] = TRAIN_PHOTOS,
                      held_out_photos: Sequence[str] = HELD_OUT_PHOTOS) -> Path:
    """ImageNet folder layout of photo crops: <root>/train/<photo>/NNNN.png from the training
    photos and <root>/val/<photo>/NNNN.png from the held-out ones (class = source photo)."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    for split, names, n in (('train', available_photos(train_photos), train_per_photo),
                            ('val', available_photos(held_out_photos), val_per_photo)):
        if not names:
            raise FileNotFoundError(f'none of the photos {tuple(train_photos)} / '
                                    f'{tuple(held_out_photos)} are in {skimage_photo_dir()}')
        for name in names:
            photo = load_photo(name)
            d = root / split / name
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                Image.fromarray(random_crop(rng, photo, (size, size))).save(d / f'{i:04d}.png')
    return root


class PhotoBackgrounds:
    """Callable (rng, h, w) -> (h, w, 3) uint8 crop of one of the demo photos."""

    def __init__(self, names: Sequence[str] = TRAIN_PHOTOS + HELD_OUT_PHOTOS) -> None:
        self.photos = [load_photo(n) for n in available_photos(names)]

    def __call__(self, rng: np.random.Generator, h: int, w: int) -> np.ndarray:
        photo = self.photos[int(rng.integers(0, len(self.photos)))]
        return random_crop(rng, photo, (h, w), scale=(0.2, 0.8))


def _background(rng, h, w, backgrounds):
    if backgrounds is None:
        return rng.integers(90, 140, (h, w, 3)).astype(np.uint8)
    return np.ascontiguousarray(backgrounds(rng, h, w), dtype=np.uint8).copy()


# ---- labelled set: ADE20K layout -------------------------------------------------------------
def _scene(rng, h, w, n_obj, backgrounds=None):
    """A background with n_obj axis-aligned rectangles: (image, [(cls, x0, y0, x1, y1)])."""
    img = _background(rng, h, w, backgrounds)
    objs = []
    for _ in range(n_obj):
        c = int(rng.integers(1, len(COLOURS) + 1))
        bw, bh = int(rng.integers(w // 4, w // 2)), int(rng.integers(h // 4, h // 2))
        x0, y0 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
        img[y0:y0 + bh, x0:x0 + bw] = COLOURS[c - 1]
        objs.append((c, x0, y0, x0 + bw, y0 + bh))
    return img, objs


def make_ade(root: str | Path, n_train: int = 8, n_val: int = 2, size=(64, 96), seed: int = 0,
             backgrounds=None) -> Path:
    """ADEChallengeData2016 layout: images/{training,validation}/*.jpg and single-channel
    annotations/{training,validation}/*.png (0 = other, 1..3 = classes)."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    for split, n in (('training', n_train), ('validation', n_val)):
        (root / 'images' / split).mkdir(parents=True, exist_ok=True)
        (root / 'annotations' / split).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            img, objs = _scene(rng, size[0], size[1], 3, backgrounds)
            label = np.zeros(size, np.uint8)
            for c, x0, y0, x1, y1 in objs:  # later objects paint over earlier ones, as in img
                label[y0:y1, x0:x1] = c
            Image.fromarray(img).save(root / 'images' / split / f'ADE_{split}_{i:04d}.jpg',
                                      quality=95)
            Image.fromarray(label).save(root / 'annotations' / split / f'ADE_{split}_{i:04d}.png')
    return root


# ---- labelled set: COCO layout ---------------------------------------------------------------
def make_coco(root: str | Path, n_train: int = 6, n_val: int = 2, size=(96, 128),
              seed: int = 0, backgrounds=None) -> Path:
    """COCO layout: {train,val}2017/*.jpg and annotations/instances_{train,val}2017.json with
    polygon masks (non-overlapping boxes, so each polygon is the visible object)."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    (root / 'annotations').mkdir(parents=True, exist_ok=True)
    ann_id = 1
    for split, n in (('train2017', n_train), ('val2017', n_val)):
        (root / split).mkdir(parents=True, exist_ok=True)
        images, anns = [], []
        for i in range(n):
            h, w = size
            pil = Image.fromarray(_background(rng, h, w, backgrounds))
            draw = ImageDraw.Draw(pil)
            # two objects in the left / right halves: a rectangle and a triangle
            for k, (xa, xb) in enumerate(((4, w // 2 - 4), (w // 2 + 4, w - 4))):
                c = int(rng.integers(1, 4))
                x0 = int(rng.integers(xa, xa + 8))
                x1 = int(rng.integers(xb - 8, xb))
                y0 = int(rng.integers(4, h // 3))
                y1 = int(rng.integers(2 * h // 3, h - 4))
                if k == 0:
                    poly = [x0, y0, x1, y0, x1, y1, x0, y1]
                else:
                    poly = [(x0 + x1) // 2, y0, x1, y1, x0, y1]
                draw.polygon(poly, fill=COLOURS[c - 1])
                xs, ys = poly[0::2], poly[1::2]
                bbox = [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)]
                area = float(bbox[2] * bbox[3] * (1.0 if k == 0 else 0.5))
                anns.append(dict(id=ann_id, image_id=i + 1, category_id=c, iscrowd=0,
                                 bbox=[float(v) for v in bbox], area=area,
                                 segmentation=[[float(v) for v in poly]]))
                ann_id += 1
            name = f'{i + 1:012d}.jpg'
            pil.save(root / split / name, quality=95)
            images.append(dict(id=i + 1, file_name=name, height=h, width=w))
        with open(root / 'annotations' / f'instances_{split}.json', 'w') as f:
            json.dump(dict(images=images, annotations=anns, categories=COCO_CATS), f)
    return root


def make_demo_data(root: str | Path, size: int = 64, quick: bool = False,
                   seed: int = 0) -> dict[str, Path]:
    """All demo data under root: imagenet/ (photo crops), ade/ and coco/ (shapes on photos)."""
    root = Path(root)
    bg = PhotoBackgrounds()
    n = dict(train_per_photo=12, val_per_photo=8) if quick else {}
    return dict(
        imagenet=make_photo_folder(root / 'imagenet', size=size, seed=seed, **n),
        ade=make_ade(root / 'ade' / 'ADEChallengeData2016', n_train=8 if quick else 48,
                     n_val=4 if quick else 12, size=(64, 96), seed=seed, backgrounds=bg),
        coco=make_coco(root / 'coco', n_train=6 if quick else 40, n_val=4 if quick else 10,
                       size=(96, 128), seed=seed, backgrounds=bg))
