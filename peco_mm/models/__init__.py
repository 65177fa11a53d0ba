"""Registered models: PeCoViT, its video form PeCoTimeSformer, the pyramid adapter (and, imported
on first use, the MIM algorithms). Checkpoint reading and key maps live in `peco_mm.checkpoint`."""
from .pyramid_adapter import ViTPyramidAdapter, default_pyramid_indices
from .video_vit import PeCoTimeSformer
from .vit import ARCH_ZOO, PeCoViT, load_pretrained

__all__ = ['ARCH_ZOO', 'PeCoTimeSformer', 'PeCoViT', 'ViTPyramidAdapter',
           'default_pyramid_indices', 'load_pretrained']
