"""Training hooks: codebook health, reconstruction visualisation."""
from .codebook_health import CodebookHealthHook, find_quantizer
from .reconstruction_vis import ReconstructionVisHook

__all__ = ['CodebookHealthHook', 'ReconstructionVisHook', 'find_quantizer']
