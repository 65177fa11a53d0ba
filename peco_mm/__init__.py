"""peco_mm: PeCo (Perceptual Codebook for BERT pre-training of vision transformers) as an
OpenMMLab plugin. `import peco_mm` registers every peco_mm type (see `peco_mm.registry`)."""
from .registry import register_all
from .version import __version__

register_all()

__all__ = ['__version__', 'register_all']
