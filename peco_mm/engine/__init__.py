"""Training machinery: layer-decay constructor, bf16 autocast wrapper, hooks, torch/mmengine
compatibility."""
from .compat import allow_mmengine_checkpoints
from .hooks import CodebookHealthHook, ReconstructionVisHook
from .optimizers import (AutocastOptimWrapper, LayerDecayOptimWrapperConstructor,
                         layer_decay_param_groups)

__all__ = ['AutocastOptimWrapper', 'CodebookHealthHook', 'LayerDecayOptimWrapperConstructor',
           'ReconstructionVisHook', 'allow_mmengine_checkpoints', 'layer_decay_param_groups']
