"""Registered models: PeCoViT, its video form PeCoTimeSformer (and, imported on first use, the
pyramid adapter, which is mmseg's, and the MIM algorithms). Checkpoint reading and key maps live
in `peco_mm.checkpoint`."""
import importlib

from .video_vit import PeCoTimeSformer
from .pretrained import load_pretrained
from .vit import PeCoViT
from .vit_config import ARCH_ZOO, default_pyramid_indices

__all__ = ['ARCH_ZOO', 'PeCoTimeSformer', 'PeCoViT', 'ViTPyramidAdapter',
           'default_pyramid_indices', 'load_pretrained']


def __getattr__(name: str):
    """`ViTPyramidAdapter` imports mmseg, so it is imported when first asked for."""
    if name == 'ViTPyramidAdapter':
        return importlib.import_module('.pyramid_adapter', __name__).ViTPyramidAdapter
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
