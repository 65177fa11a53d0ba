"""Training machinery a config builds: the layer-decay constructor, the bf16 autocast and
non-finite guard optimizer wrappers, hooks. The launcher is `peco_mm.supervisor`'s."""
from .hooks import CodebookHealthHook, ReconstructionVisHook
from .optimizers import (AutocastOptimWrapper, LayerDecayOptimWrapperConstructor,
                         layer_decay_param_groups)

__all__ = ['AutocastOptimWrapper', 'CodebookHealthHook', 'LayerDecayOptimWrapperConstructor',
           'ReconstructionVisHook', 'layer_decay_param_groups']
