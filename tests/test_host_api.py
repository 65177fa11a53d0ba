"""peco_mm uses its hosts' public APIs: it overrides no private method of a host class,
patches no method of a runner, model or optimizer wrapper (nor any of mmengine's classes), and
reads no private attribute of the runner."""
import ast
import inspect

import pytest

from tests.conftest import ROOT

HOSTS = ('mmengine', 'mmcv', 'mmpretrain', 'mmseg', 'mmdet', 'mmaction', 'timm', 'torch')


def sources():
    return sorted((ROOT / 'peco_mm').rglob('*.py'))


def host_methods() -> set[str]:
    """Every method name of mmengine's Runner, BaseModel, optimizer wrappers and
    HistoryBuffer: what a patch of those classes or their objects would assign."""
    from mmengine.logging import HistoryBuffer, MessageHub
    from mmengine.model import BaseModel
    from mmengine.optim import AmpOptimWrapper, OptimWrapper
    from mmengine.runner import Runner
    names = set()
    for cls in (Runner, BaseModel, OptimWrapper, AmpOptimWrapper, HistoryBuffer, MessageHub):
        names |= {n for n, v in inspect.getmembers(cls)
                  if inspect.isroutine(v) and n not in ('__init__', 'type')}
    # (nn.Module.type casts a model's dtype; `cfg.type = ...` is a config write)
    return names


def patches(tree: ast.AST, methods: set[str]) -> list[str]:
    """`obj.method = ...` where obj is not `self` / `cls` and method names a host method."""
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        for t in targets:
            if (isinstance(t, ast.Attribute) and t.attr in methods
                    and not (isinstance(t.value, ast.Name) and t.value.id in ('self', 'cls'))):
                found.append(f'line {t.lineno}: {ast.unparse(t)} = ...')
    return found


def private_runner_reads(tree: ast.AST) -> list[str]:
    return [f'line {n.lineno}: {ast.unparse(n)}' for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr.startswith('_')
            and not n.attr.startswith('__')
            and isinstance(n.value, ast.Name) and n.value.id == 'runner']


# no exception left (the console filters go on the runner's logger through mmengine's public
# build_logger / build_strategy, peco_mm.supervisor.console.QuietConsole)
KNOWN: dict[str, int] = {}


def test_no_host_method_is_patched_and_no_private_runner_state_read():
    methods = host_methods()
    bad = []
    for path in sources():
        tree = ast.parse(path.read_text())
        found = patches(tree, methods) + private_runner_reads(tree)
        name = str(path.relative_to(ROOT))
        if len(found) != KNOWN.get(name, 0):
            bad += [f'{name} {b}' for b in found]
    assert bad == []


def private_overrides(cls) -> list[str]:
    """Methods `_name` (not dunder) that `cls` defines and a host base class also defines."""
    hosts = [b for b in cls.__mro__[1:] if b.__module__.split('.')[0] in HOSTS]
    return [f'{cls.__module__}.{cls.__name__}.{name}' for name, v in vars(cls).items()
            if name.startswith('_') and not name.startswith('__') and callable(v)
            and any(name in vars(b) for b in hosts)]


def peco_mm_classes() -> set[type]:
    """Every class defined in peco_mm's modules (the host-dependent ones included, where the
    host is installed), and the optimizer wrappers it makes when registering them."""
    import importlib
    import pkgutil

    import peco_mm
    classes = set()
    for info in pkgutil.walk_packages(peco_mm.__path__, 'peco_mm.'):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # a host (or an optional package) that is not installed
            continue
        classes |= {c for c in vars(module).values()
                    if inspect.isclass(c) and c.__module__ == info.name}
    from peco_mm.registry import HOOKS, OPTIM_WRAPPERS  # and the classes made at registration
    classes |= {c for reg in (HOOKS, OPTIM_WRAPPERS) for c in reg.module_dict.values()
                if c.__module__.startswith('peco_mm.')}
    return classes


def test_no_private_method_of_a_host_or_torch_class_is_overridden():
    """Hooks, optimizer wrappers, models, layers, datasets: no class of peco_mm overrides a
    private method (`_load_from_state_dict`, `_apply`, ...) of a host's or torch's class."""
    classes = peco_mm_classes()
    names = {c.__name__ for c in classes}
    assert {'AtomicCheckpointHook', 'NonFiniteLossHook', 'NonFiniteGuardAmpOptimWrapper',
            'PeCoViT', 'PerceptualLoss', 'ReconstructionViT'} <= names
    assert [o for c in classes for o in private_overrides(c)] == []


@pytest.mark.parametrize('code, expected', [
    ('runner.save_checkpoint = wrap(runner.save_checkpoint)', 1),
    ('ow.update_params = guard', 1),
    ('HistoryBuffer.__getstate__ = f', 1),
    ('self.update_params = 3', 0),
    ('loader = runner._train_dataloader', 0),
])
def test_the_checks_catch_what_they_should(code, expected):
    tree = ast.parse(code)
    assert len(patches(tree, host_methods())) == expected
    if 'runner._' in code:
        assert private_runner_reads(tree) == ['line 1: runner._train_dataloader']

    from mmengine.hooks import CheckpointHook

    class Bad(CheckpointHook):
        def _save_checkpoint(self, runner):
            pass
    assert private_overrides(Bad) == [f'{__name__}.Bad._save_checkpoint']
