"""Images for the tokenizer measurements (code agreement, gradient shares): the first `num`
images of a folder, or, with no folder, random crops of the colour photos scikit-image ships
(nothing is downloaded)."""
from __future__ import annotations

import numpy as np
import torch


def measurement_images(folder: str | None, size: int, num: int, seed: int = 0
                       ) -> torch.Tensor:
    """(num, 3, size, size) RGB in [-1, 1] (the tokenizer's input range)."""
    if folder:
        from .images import find_images, load_image
        files = find_images(folder)[:num]
        return torch.stack([load_image(f, size) for f in files])
    from .demo_data import (HELD_OUT_PHOTOS, TRAIN_PHOTOS, available_photos, load_photo,
                            random_crop)
    rng = np.random.default_rng(seed)
    photos = [load_photo(n) for n in available_photos(TRAIN_PHOTOS + HELD_OUT_PHOTOS)]
    crops = [random_crop(rng, photos[i % len(photos)], (size, size), scale=(0.3, 1.0))
             for i in range(num)]
    x = torch.from_numpy(np.stack(crops)).permute(0, 3, 1, 2).float()  # (N, 3, H, W)
    return x / 127.5 - 1
