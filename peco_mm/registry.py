"""The one place that touches the OpenMMLab registries.

peco_mm registers into mmengine's root registries. Every host registry (mmpretrain, mmdet,
mmseg) is a child of those, and a child looks a plain name up in its parents, so after
`custom_imports=dict(imports=['peco_mm'])` a type such as `PeCoViT` resolves by its plain name
in any scope, including when a host builds it internally (a detector building its backbone,
a self-supervised algorithm building its target generator).

Modules that subclass a host's classes are imported only when that host is installed
(`OPTIONAL_MODULES`): with mmdet absent, the mmseg and mmpretrain parts still register.
"""
from __future__ import annotations

import importlib
import warnings

from mmengine.registry import DATASETS, HOOKS, METRICS, MODELS, OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import TRANSFORMS, VISUALIZERS

__all__ = ['DATASETS', 'HOOKS', 'METRICS', 'MODELS', 'OPTIM_WRAPPER_CONSTRUCTORS', 'TRANSFORMS',
           'VISUALIZERS', 'register_all']

# modules that only need torch / mmengine / mmcv / timm
CORE_MODULES = [
    'peco_mm.models',
    'peco_mm.engine',
    'peco_mm.datasets.seg_checks',
    'peco_mm.datasets.bad_samples',
    'peco_mm.tokenizer',
    'peco_mm.engine.hooks',
    'peco_mm.evaluation',
]
# module -> the host packages it needs; skipped (not an error) when one is missing
OPTIONAL_MODULES: dict[str, tuple[str, ...]] = {
    'peco_mm.datasets.coco_checks': ('mmdet',),
    'peco_mm.datasets.mim_transforms': ('mmcv',),
    'peco_mm.models.mim_head': (),
    'peco_mm.models.peco': ('mmpretrain',),
    'peco_mm.models.peco_mae': ('mmpretrain',),
}

_registered = False


def host_available(name: str) -> bool:
    """True when the host imports (a broken or absent install counts as missing)."""
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def register_all() -> list[str]:
    """Import every module that registers something; return the optional ones skipped."""
    global _registered
    from .engine.compat import allow_mmengine_checkpoints
    allow_mmengine_checkpoints()
    skipped = []
    for mod in CORE_MODULES:
        importlib.import_module(mod)
    for mod, hosts in OPTIONAL_MODULES.items():
        missing = [h for h in hosts if not host_available(h)]
        if missing:
            skipped.append(mod)
            if not _registered:
                warnings.warn(f'peco_mm: {mod} not registered: {", ".join(missing)} is not '
                              'installed', stacklevel=2)
            continue
        importlib.import_module(mod)
    _registered = True
    return skipped
