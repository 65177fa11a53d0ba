"""Training machinery: the launcher, layer-decay constructor, bf16 autocast wrapper, hooks."""
from .hooks import CodebookHealthHook, ReconstructionVisHook
from .optimizers import (AutocastOptimWrapper, LayerDecayOptimWrapperConstructor,
                         layer_decay_param_groups)

__all__ = ['AutocastOptimWrapper', 'CodebookHealthHook', 'LayerDecayOptimWrapperConstructor',
           'ReconstructionVisHook', 'layer_decay_param_groups']
