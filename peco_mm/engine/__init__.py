"""Training machinery: layer-decay constructor, hooks, torch/mmengine compatibility."""
from .compat import allow_mmengine_checkpoints
from .hooks import CodebookHealthHook, ReconstructionVisHook
from .optimizers import LayerDecayOptimWrapperConstructor, layer_decay_param_groups

__all__ = ['CodebookHealthHook', 'LayerDecayOptimWrapperConstructor', 'ReconstructionVisHook',
           'allow_mmengine_checkpoints', 'layer_decay_param_groups']
