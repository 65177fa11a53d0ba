"""peco_mm: PeCo (Perceptual Codebook for BERT pre-training of vision transformers) as an
OpenMMLab plugin. `import peco_mm` registers every peco_mm type in the OpenMMLab registries
(`register_all`), serves mmcv's compiled ops from torchvision where mmcv has none
(`peco_mm.ops`), and changes nothing else of mmengine or torch: PeCo's launcher and tools read
mmengine's checkpoints through peco_mm's weights-only gate while their runs last
(`peco_mm.checkpoint.checkpoints_through_gate`)."""
from __future__ import annotations

import importlib
import sys
import warnings

from .ops import ext_finder as _ext_finder

# mmcv-lite's missing `mmcv._ext` (and mmaction2's missing module) served from peco_mm/ops/
# wherever peco_mm is imported, also without the start-up hook (a checkout on PYTHONPATH);
# first, so that no host has imported mmcv.ops before
_ext_finder.install()

from . import registry as _registry  # noqa: E402
from .version import __version__  # noqa: E402

__all__ = ['__version__', 'register_all']

# modules that only need torch / mmengine / mmcv / timm: imported by `import peco_mm`
CORE_MODULES = [
    'peco_mm.models',
    'peco_mm.models.mim_head',
    'peco_mm.engine',
    'peco_mm.datasets.seg_checks',
    'peco_mm.datasets.bad_samples',
    'peco_mm.datasets.mim_transforms',
    'peco_mm.datasets.pair_views',
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
    'peco_mm.models.reconstruction_vit': ('mmpretrain', 'MODELS', ('ReconstructionViT',)),
    'peco_mm.models.pyramid_adapter': ('mmseg', 'MODELS', ('ViTPyramidAdapter',)),
    'peco_mm.datasets.coco_checks': ('mmdet', 'DATASETS', ('CheckedCocoDataset',)),
    'peco_mm.models.video_head': ('mmaction', 'MODELS', ('TimeSformerHeadFP32',)),
}

_registered = False


def register_all() -> list[str]:
    """Import every core module that registers something, and register stand-ins for the
    host modules (`HOST_MODULES`); return the host modules skipped for a missing host."""
    global _registered
    skipped = []
    if not _registered:
        for problem in _registry.host_stack_problems():
            warnings.warn(f'peco_mm: {problem}', stacklevel=2)
    for mod in CORE_MODULES:
        importlib.import_module(mod)
    for mod, (host, registry_name, names) in HOST_MODULES.items():
        if not _registry.host_available(host):
            skipped.append(mod)
            if not _registered:
                warnings.warn(f'peco_mm: {mod} not registered: {host} is not installed',
                              stacklevel=2)
            continue
        if mod in sys.modules:  # already imported: its classes are registered
            continue
        registry = getattr(_registry, registry_name)
        for name in names:
            if name not in registry.module_dict:
                registry.register_module(name=name,
                                         module=_registry.lazy_builder(mod, registry, name))
    _registered = True
    return skipped


register_all()
