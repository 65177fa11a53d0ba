"""Two views of one scene from two image files: the positive pairs of a self-supervised network
whose views should share only what the two files share.

`GeometryPairViews` replaces mmpretrain's `MultiView` where the second view is not a second
augmentation of the same image but a partner file: the same path with its last folder named
`a` renamed `b` (`<root>/a/unlabeled/00007.png` -> `<root>/b/unlabeled/00007.png`). The
study's shape world writes such pairs (one shape at one pose under two independent draws of
colour, texture, background and lighting), so a contrastive network trained on them is pushed to
keep the geometry and drop the nuisances, the invariance a perceptual loss is meant to carry
into a codebook.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Sequence

from mmcv.transforms import BaseTransform, Compose

from ..registry import TRANSFORMS


@TRANSFORMS.register_module()
class GeometryPairViews(BaseTransform):
    """results['img'] = [view 1 of the loaded image, view 2 of its partner file].

    Args:
        transforms: two lists of transforms, the first applied to the loaded image, the second
            to the partner (as `MultiView(num_views=[1, 1], transforms=...)`).
        pair_dirs: (the folder of the first images, the folder of their partners): the
            partner of an image is its path with the last folder named pair_dirs[0] renamed.
    """

    def __init__(self, transforms: Sequence[Sequence[dict]],
                 pair_dirs: Sequence[str] = ('a', 'b')) -> None:
        if len(transforms) != 2:
            raise ValueError(f'GeometryPairViews: transforms has {len(transforms)} pipelines; '
                             'expected 2 (one per view)')
        if len(pair_dirs) != 2 or any(not d or '/' in d or d in ('.', '..')
                                      for d in pair_dirs) or pair_dirs[0] == pair_dirs[1]:
            raise ValueError(f'GeometryPairViews: pair_dirs={pair_dirs!r}; expected the names '
                             'of two different folders')
        self.pipelines = [Compose(list(t)) for t in transforms]
        self.pair_dirs = tuple(pair_dirs)

    def partner_path(self, path: str) -> Path:
        """The partner of `path`: the last folder named pair_dirs[0] renamed pair_dirs[1]."""
        parts = list(Path(path).parts)
        first, second = self.pair_dirs
        if first not in parts[:-1]:
            raise ValueError(f'GeometryPairViews: {path} is not inside a folder named '
                             f'{first!r}, so it has no partner')
        k = len(parts) - 2 - parts[:-1][::-1].index(first)
        partner = Path(*parts[:k], second, *parts[k + 1:])
        if not partner.is_file():
            raise FileNotFoundError(f'GeometryPairViews: {path} has no partner file {partner}')
        return partner

    def transform(self, results: dict) -> dict:
        import mmcv
        partner = copy.deepcopy(results)
        partner['img_path'] = str(self.partner_path(results['img_path']))
        partner['img'] = mmcv.imread(partner['img_path'])  # BGR, as LoadImageFromFile
        views = [self.pipelines[0](copy.deepcopy(results)), self.pipelines[1](partner)]
        results['img'] = [v['img'] for v in views]
        return results
