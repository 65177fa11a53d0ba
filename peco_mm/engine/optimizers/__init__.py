from ...utils.precision import cpu_has_native_bf16
from .autocast import AutocastOptimWrapper
from .layer_decay import (LayerDecayOptimWrapperConstructor, find_depth_provider,
                          layer_decay_param_groups)

__all__ = ['AutocastOptimWrapper', 'LayerDecayOptimWrapperConstructor', 'cpu_has_native_bf16',
           'find_depth_provider', 'layer_decay_param_groups']
