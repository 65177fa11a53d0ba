"""Deterministic toy data for `make demo` and the tests; nothing is downloaded."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


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
