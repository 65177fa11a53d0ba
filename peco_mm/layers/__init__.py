"""Plain PyTorch building blocks (no registry)."""
from .attention import Attention, Block
from .patch_embed import PatchEmbed
from .pos_embed import (RelativePositionBias, relative_position_index, resize_pos_embed,
                        resize_rel_pos_table)

__all__ = ['Attention', 'Block', 'PatchEmbed', 'RelativePositionBias',
           'relative_position_index', 'resize_pos_embed', 'resize_rel_pos_table']
