"""Registered models: PeCoViT, its video form PeCoTimeSformer, the pyramid adapter, checkpoint
conversion (and MIM parts)."""
from .convert import (FORMATS, convert_checkpoint, convert_state_dict, detect_format,
                      load_checkpoint_file, load_pretrained_vit)
from .pyramid_adapter import ViTPyramidAdapter, default_pyramid_indices
from .video_vit import PeCoTimeSformer
from .vit import ARCH_ZOO, PeCoViT, adapt_state_dict, load_pretrained

__all__ = ['ARCH_ZOO', 'FORMATS', 'PeCoTimeSformer', 'PeCoViT', 'ViTPyramidAdapter',
           'adapt_state_dict', 'convert_checkpoint', 'convert_state_dict',
           'default_pyramid_indices', 'detect_format', 'load_checkpoint_file', 'load_pretrained',
           'load_pretrained_vit']
