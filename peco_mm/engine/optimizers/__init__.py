from ...utils.precision import cpu_has_native_bf16
from .autocast import AutocastOptimWrapper
from .layer_decay import (LayerDecayOptimWrapperConstructor, find_depth_provider,
                          layer_decay_param_groups)
from .nonfinite_guard import NonFiniteGuard, guard_optim_wrapper_cfg, guarded

__all__ = ['AutocastOptimWrapper', 'LayerDecayOptimWrapperConstructor', 'NonFiniteGuard',
           'cpu_has_native_bf16', 'find_depth_provider', 'guard_optim_wrapper_cfg', 'guarded',
           'layer_decay_param_groups']
