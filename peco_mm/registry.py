"""The one place that touches the OpenMMLab registries.

peco_mm registers into mmengine's root registries. Every host registry (mmpretrain, mmdet,
mmseg) is a child of those, and a child looks a plain name up in its parents, so after
`custom_imports=dict(imports=['peco_mm'])` a type such as `PeCoViT` resolves by its plain name
in any scope, including when a host builds it internally (a detector building its backbone,
a self-supervised algorithm building its target generator).

The package's `__init__` registers everything (`register_all`): modules that subclass a host's
classes (`HOST_MODULES`) are imported when one of their types is first built, so
`import peco_mm` does not import mmpretrain or mmdet; with a host absent, its types are not
registered and the other hosts' parts still work. This module sits at the bottom of the
layers: it imports nothing of peco_mm.
"""
from __future__ import annotations

import importlib
import importlib.util

from mmengine.registry import DATASETS, HOOKS, METRICS, MODELS, OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS, TRANSFORMS, VISUALIZERS

__all__ = ['DATASETS', 'HOOKS', 'METRICS', 'MODELS', 'OPTIM_WRAPPER_CONSTRUCTORS', 'OPTIM_WRAPPERS',
           'TRANSFORMS', 'VISUALIZERS', 'host_available', 'lazy_builder', 'real_class']


def host_available(name: str) -> bool:
    """True when the host package is installed (found without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def host_stack_problems() -> list[str]:
    """Known incompatibilities of the installed host packages, one sentence each, found from
    their installed versions without importing them."""
    from importlib.metadata import PackageNotFoundError, version
    problems = []
    try:
        mmpretrain, transformers = version('mmpretrain'), version('transformers')
    except PackageNotFoundError:
        return problems
    if mmpretrain.startswith('1.') and _release(transformers) >= (4, 52):
        problems.append(
            f'mmpretrain {mmpretrain} cannot be imported next to transformers {transformers} '
            '(its multimodal models use names that transformers 4.52 removed; the error is '
            '"TypeError: NoneType takes no arguments"): pip install "transformers<4.52", or '
            'uninstall transformers')
    return problems


def _release(v: str) -> tuple[int, ...]:
    """'4.51.3' -> (4, 51, 3); stops at the first part that is not a number."""
    parts = []
    for part in v.split('.'):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


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
