"""The one place that touches the OpenMMLab registries.

peco_mm registers into mmengine's root registries. Every host registry (mmpretrain, mmdet,
mmseg) is a child of those, and a child looks a plain name up in its parents, so after
`custom_imports=dict(imports=['peco_mm'])` a type such as `PeCoViT` resolves by its plain name
in any scope, including when a host builds it internally (a detector building its backbone,
a self-supervised algorithm building its target generator).

Modules that subclass a host's classes (`HOST_MODULES`) are imported when one of their types
is first built, so `import peco_mm` does not import mmpretrain or mmdet; with a host absent,
its types are not registered and the other hosts' parts still work.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings

from mmengine.registry import DATASETS, HOOKS, METRICS, MODELS, OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS, TRANSFORMS, VISUALIZERS

__all__ = ['DATASETS', 'HOOKS', 'METRICS', 'MODELS', 'OPTIM_WRAPPER_CONSTRUCTORS', 'OPTIM_WRAPPERS',
           'TRANSFORMS', 'VISUALIZERS', 'register_all']

# modules that only need torch / mmengine / mmcv / timm: imported by `import peco_mm`
CORE_MODULES = [
    'peco_mm.models',
    'peco_mm.models.mim_head',
    'peco_mm.engine',
    'peco_mm.datasets.seg_checks',
    'peco_mm.datasets.bad_samples',
    'peco_mm.datasets.mim_transforms',
    'peco_mm.tokenizer',
    'peco_mm.engine.hooks',
    'peco_mm.evaluation',
]
# modules that subclass a host's classes: module -> (host package, registry, names). They are
# imported when one of their names is first built (importing mmpretrain or mmdet costs about
# a second each), and skipped (not an error) when the host is not installed.
HOST_MODULES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    'peco_mm.models.peco': ('mmpretrain', 'MODELS', ('PeCo',)),
    'peco_mm.models.data_preprocessor': ('mmpretrain', 'MODELS',
                                         ('OneViewTwoNormDataPreprocessor',)),
    'peco_mm.models.peco_mae': ('mmpretrain', 'MODELS', ('PeCoMAE', 'PeCoMAEDecoder')),
    'peco_mm.datasets.coco_checks': ('mmdet', 'DATASETS', ('CheckedCocoDataset',)),
}

_registered = False


def host_available(name: str) -> bool:
    """True when the host package is installed (found without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def lazy_builder(module: str, registry, name: str):
    """A stand-in registered as `name`: on first use it imports `module`, whose own
    registration replaces it, then builds the real class with the same arguments."""
    def build(*args, **kwargs):
        importlib.import_module(module)
        real = registry.get(name)
        if real is build:
            raise RuntimeError(f'{module} did not register {name}')
        return real(*args, **kwargs)

    build.__name__ = build.__qualname__ = name
    build.__doc__ = f'{name} from {module}, imported on first use.'
    build.lazy_module = module
    return build


def real_class(registry, name: str):
    """The class registered as `name`, importing its module first when a stand-in holds the
    name (for code that inspects the class, e.g. its signature)."""
    obj = registry.get(name)
    module = getattr(obj, 'lazy_module', None)
    if module is not None:
        importlib.import_module(module)
        obj = registry.get(name)
    return obj


def register_all() -> list[str]:
    """Import every core module that registers something, and register stand-ins for the
    host modules (`HOST_MODULES`); return the host modules skipped for a missing host."""
    global _registered
    from .engine.compat import allow_mmengine_checkpoints, route_mmengine_checkpoints
    allow_mmengine_checkpoints()
    route_mmengine_checkpoints()  # load_from / resume / init_cfg read weights-only
    skipped = []
    for mod in CORE_MODULES:
        importlib.import_module(mod)
    for mod, (host, registry_name, names) in HOST_MODULES.items():
        if not host_available(host):
            skipped.append(mod)
            if not _registered:
                warnings.warn(f'peco_mm: {mod} not registered: {host} is not installed',
                              stacklevel=2)
            continue
        if mod in sys.modules:  # already imported: its classes are registered
            continue
        registry = globals()[registry_name]
        for name in names:
            if name not in registry.module_dict:
                registry.register_module(name=name, module=lazy_builder(mod, registry, name))
    _registered = True
    return skipped
