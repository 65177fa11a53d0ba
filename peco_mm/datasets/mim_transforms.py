"""The mask generators of masked image modeling: one seam for every MIM model and tool.

A mask generator is a pipeline transform that adds `results['mask']`, a (H, W) bool array over
the ViT's patch grid with a fixed number of True (masked) patches. `PeCo` and `PeCoMAE` read it
from the data samples, and `tools/visualize_mim.py` and the benchmark build the generator that
the config's pipeline names (`mask_step_of`). A new strategy subclasses `MaskGenerator`,
implements `generate`, and is registered; nothing else names it.

- `BlockwiseMaskGenerator`: block-wise masking (BEiT, Bao et al. 2022, Alg. 1; PeCo Sec. 3.3).
- `RandomMaskGenerator`: a uniformly random subset (MAE, He et al. 2022), drawn from torch's
  generator as MAE draws it, so a seed gives MAE's masks.

Block-wise masking, our own:

Why not mmpretrain's `BEiTMaskGenerator`: its port of unilm's generator draws the block corner
with `np.random.randint(0, H - h)`, whose upper bound is exclusive (unilm uses Python's
inclusive `random.randint`), so the last row and the last column of the patch grid are never
masked: 27 of the 196 ViT-B patches are never predicted. This generator draws corners over the
whole grid, and always returns exactly `num_masking_patches` masked patches, so every image in a
batch has the same count and the model can gather the masked positions with static shapes.

The crop comes from mmpretrain's `RandomResizedCropAndInterpolationWithTwoPic`, which is right
as it is: one view when the tokenizer reads the ViT's size (the shipped configs; the data
preprocessor normalises it twice), two views when `second_size` differs.
"""
from __future__ import annotations

import math
from abc import abstractmethod
from typing import Sequence

import numpy as np
import torch
from mmcv.transforms import BaseTransform

from ..registry import TRANSFORMS


class MaskGenerator(BaseTransform):
    """Base of the mask generators: `results['mask']` = `generate()`, a (H, W) bool array with
    exactly `num_masking_patches` True on an `input_size` patch grid."""
    height: int
    width: int
    num_masking_patches: int

    def set_grid(self, input_size: int | Sequence[int], num_masking_patches: int) -> None:
        self.height, self.width = grid_size(input_size)
        num_patches = self.height * self.width
        if not 1 <= num_masking_patches <= num_patches:
            raise ValueError(f'num_masking_patches={num_masking_patches}; allowed: 1..'
                             f'{num_patches} for a {self.height}x{self.width} grid')
        self.num_masking_patches = int(num_masking_patches)

    def transform(self, results: dict) -> dict:
        results['mask'] = self.generate()
        return results

    @abstractmethod
    def generate(self) -> np.ndarray:
        """One mask: (H, W) bool, exactly `num_masking_patches` True."""


def grid_size(input_size: int | Sequence[int]) -> tuple[int, int]:
    """(H, W) of a patch grid given as an int or a pair."""
    size = (input_size, input_size) if isinstance(input_size, int) else tuple(input_size)
    if len(size) != 2 or min(size) < 1:
        raise ValueError(f'input_size={input_size!r}; expected a positive int or (H, W)')
    return int(size[0]), int(size[1])


def mask_step_of(pipeline: list) -> dict | None:
    """A copy of the config of the mask generator a data pipeline (a list of transform
    configs) names, for `TRANSFORMS.build`; None when it has none."""
    for step in pipeline:
        cls = TRANSFORMS.get(step.get('type')) if isinstance(step, dict) else None
        if isinstance(cls, type) and issubclass(cls, MaskGenerator):
            return dict(step)
    return None


@TRANSFORMS.register_module()
class RandomMaskGenerator(MaskGenerator):
    """Add `results['mask']`: round(mask_ratio * H * W) patches drawn uniformly (MAE): the
    patches after the first H*W - M of the argsort of uniform noise, with torch's generator
    (mmengine seeds it in each data worker), the draw of MAE's `random_masking`.

    Args:
        input_size: the patch grid, e.g. 14 or (14, 14) for 224 px with patch 16.
        mask_ratio: fraction of patches masked (MAE: 0.75).
    """

    def __init__(self, input_size: int | Sequence[int] = 14, mask_ratio: float = 0.75) -> None:
        if not 0 < mask_ratio < 1:
            raise ValueError(f'mask_ratio={mask_ratio}; allowed: 0 < mask_ratio < 1')
        H, W = grid_size(input_size)
        n = H * W
        self.mask_ratio = float(mask_ratio)
        count = int(round(mask_ratio * n))
        if not 0 < count < n:
            raise ValueError(f'mask_ratio={mask_ratio} masks {count} of the {n} patches of '
                             f'input_size={input_size!r}; at least one must be masked and one '
                             'visible')
        self.set_grid(input_size, count)

    def generate(self) -> np.ndarray:
        n = self.height * self.width
        ids_shuffle = torch.rand(n).argsort()  # (N,): small noise is kept, as in MAE
        mask = torch.zeros(n, dtype=torch.bool)
        mask[ids_shuffle[n - self.num_masking_patches:]] = True
        return mask.view(self.height, self.width).numpy()

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}(input_size=({self.height}, {self.width}), '
                f'mask_ratio={self.mask_ratio})')


@TRANSFORMS.register_module()
class BlockwiseMaskGenerator(MaskGenerator):
    """Add `results['mask']`: a (H, W) bool array with exactly `num_masking_patches` True.

    Rectangles of `min_num_patches`..`max_num_patches` patches with aspect ratio in
    [min_aspect, max_aspect] are added until the count is reached (BEiT). If ten blocks in a
    row fail to fit, the remainder is grown patch by patch from the mask's border, so the count
    is exact and the mask stays block-shaped.

    Args:
        input_size: the patch grid, e.g. 14 or (14, 14) for 224 px with patch 16.
        num_masking_patches: patches masked per image (BEiT/PeCo: 75 of 196).
        min_num_patches: smallest block area (BEiT: 16).
        max_num_patches: largest block area; None = num_masking_patches.
        min_aspect: smallest block aspect ratio h/w (BEiT: 0.3).
        max_aspect: largest aspect ratio; None = 1 / min_aspect.
    """

    def __init__(self,
                 input_size: int | Sequence[int] = 14,
                 num_masking_patches: int = 75,
                 min_num_patches: int = 16,
                 max_num_patches: int | None = None,
                 min_aspect: float = 0.3,
                 max_aspect: float | None = None) -> None:
        self.set_grid(input_size, num_masking_patches)
        max_num_patches = num_masking_patches if max_num_patches is None else max_num_patches
        if not 1 <= min_num_patches <= max_num_patches:
            raise ValueError(f'min_num_patches={min_num_patches}, max_num_patches='
                             f'{max_num_patches}; need 1 <= min <= max')
        max_aspect = 1.0 / min_aspect if max_aspect is None and min_aspect > 0 else max_aspect
        if not (min_aspect > 0 and max_aspect is not None and max_aspect >= min_aspect):
            raise ValueError(f'min_aspect={min_aspect}, max_aspect={max_aspect}; need '
                             '0 < min_aspect <= max_aspect')
        self.min_num_patches = int(min_num_patches)
        self.max_num_patches = int(max_num_patches)
        self.log_aspect = (math.log(min_aspect), math.log(max_aspect))

    def generate(self) -> np.ndarray:
        """One mask, (H, W) bool, exactly `num_masking_patches` True."""
        mask = np.zeros((self.height, self.width), dtype=bool)
        count, failures = 0, 0
        while count < self.num_masking_patches and failures < 10:
            budget = min(self.num_masking_patches - count, self.max_num_patches)
            added = self.add_block(mask, budget)
            count += added
            failures = failures + 1 if added == 0 else 0
        if count < self.num_masking_patches:
            self.grow(mask, self.num_masking_patches - count)
        return mask

    def add_block(self, mask: np.ndarray, budget: int) -> int:
        """Mask one random rectangle adding 1..budget new patches; return how many (0 = none)."""
        lo, hi = sorted((self.min_num_patches, budget))
        for _ in range(10):
            area = np.random.uniform(lo, hi)
            aspect = math.exp(np.random.uniform(*self.log_aspect))
            h = int(round(math.sqrt(area * aspect)))
            w = int(round(math.sqrt(area / aspect)))
            if not (1 <= h <= self.height and 1 <= w <= self.width):
                continue
            top = np.random.randint(0, self.height - h + 1)  # inclusive of the last row
            left = np.random.randint(0, self.width - w + 1)
            block = mask[top:top + h, left:left + w]
            new = h * w - int(block.sum())
            if 0 < new <= budget:
                block[...] = True
                return new
        return 0

    def grow(self, mask: np.ndarray, n: int) -> None:
        """Mask n more patches, each touching the mask (4-neighbourhood) where possible."""
        for _ in range(n):
            near = np.zeros_like(mask)
            near[1:] |= mask[:-1]
            near[:-1] |= mask[1:]
            near[:, 1:] |= mask[:, :-1]
            near[:, :-1] |= mask[:, 1:]
            candidates = np.flatnonzero(near & ~mask)
            if candidates.size == 0:
                candidates = np.flatnonzero(~mask)
            mask.flat[np.random.choice(candidates)] = True

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}(input_size=({self.height}, {self.width}), '
                f'num_masking_patches={self.num_masking_patches}, '
                f'min_num_patches={self.min_num_patches}, max_num_patches={self.max_num_patches}, '
                f'aspect=({math.exp(self.log_aspect[0]):.3g}, {math.exp(self.log_aspect[1]):.3g}))')
