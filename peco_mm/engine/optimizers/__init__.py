from .layer_decay import (LayerDecayOptimWrapperConstructor, find_depth_provider,
                          layer_decay_param_groups)

__all__ = ['LayerDecayOptimWrapperConstructor', 'find_depth_provider',
           'layer_decay_param_groups']
