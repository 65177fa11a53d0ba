"""Registered models: PeCoViT, its video form PeCoTimeSformer, the pyramid adapter (and, imported
on first use, the MIM algorithms). Checkpoint reading and key maps live in `peco_mm.checkpoint`."""
from .pyramid_adapter import ViTPyramidAdapter, default_pyramid_indices
from .video_vit import PeCoTimeSformer
from .pretrained import load_pretrained
from .vit import PeCoViT
from .vit_config import ARCH_ZOO

__all__ = ['ARCH_ZOO', 'PeCoTimeSformer', 'PeCoViT', 'ViTPyramidAdapter',
           'default_pyramid_indices', 'load_pretrained']
