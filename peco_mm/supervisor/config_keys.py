"""Unknown keys (and unknown hook types) in a config are refused before the runner is built,
naming the key and the nearest valid one.

mmengine passes a hook's or a model part's config as keyword arguments: a misspelt key either
fails late (`default_hooks.checkpoint.intervl=5` reaches `CheckpointHook(**kwargs)` and breaks
the first save, after a whole epoch) or is ignored (`model.backbone.arch.num_layer=2` leaves
the architecture's 12 blocks). `check_config_keys(cfg)` compares the keys of every hook
(`default_hooks`, `custom_hooks`) and of every peco_mm part of the model (including the
backbone's `arch` dict) with the signature of the class they build, and `check_run_keys(cfg)`
those of the optimizer wrapper and its optimizer, the data loaders, the train / val / test
loops and `env_cfg` (with its `dist_cfg` and `mp_cfg`), which would otherwise stop in a host
traceback (`OptimWrapper.__init__() got an unexpected keyword argument`) or, as
`env_cfg.dist_cfg.timout`, be ignored.
"""
from __future__ import annotations

import difflib
import inspect

from mmengine.config import Config

# keys that mmengine's builders consume themselves, never passed to the class
BUILDER_KEYS = ('type', 'priority', '_scope_')
# what the runner reads from a data loader's config itself (the rest goes to torch's DataLoader)
LOADER_KEYS = ('dataset', 'sampler', 'batch_sampler', 'collate_fn', 'worker_init_fn',
               'num_batch_per_epoch', 'disable_subprocess_warning')
# the runner's env_cfg (mmengine's setup_env; cpu_malloc: peco_mm.supervisor.malloc)
ENV_KEYS = ('cudnn_benchmark', 'mp_cfg', 'dist_cfg', 'resource_limit', 'cpu_malloc')
MP_KEYS = ('mp_start_method', 'opencv_num_threads')
# the hooks mmengine's Runner builds by these names (`register_default_hooks`), with the
# hosts' `visualization`: a `default_hooks` entry replaces the default of its name whole
DEFAULT_HOOKS = {'runtime_info': 'RuntimeInfoHook', 'timer': 'IterTimerHook',
                 'sampler_seed': 'DistSamplerSeedHook', 'logger': 'LoggerHook',
                 'param_scheduler': 'ParamSchedulerHook', 'checkpoint': 'CheckpointHook',
                 'visualization': "the host's VisualizationHook"}


def check_config_keys(cfg: Config) -> None:
    """Raise ValueError at the first unknown key of a hook or of a peco_mm model part."""
    from mmengine.registry import HOOKS, MODELS
    scope = cfg.get('default_scope')
    for name, hook in (cfg.get('default_hooks') or {}).items():
        check_default_hook_name(cfg.default_hooks, name)
        check_keys(hook, f'default_hooks.{name}', HOOKS, scope, only_own=False)
    for i, hook in enumerate(cfg.get('custom_hooks') or []):
        check_keys(hook, f'custom_hooks.{i}', HOOKS, scope, only_own=False)
    walk_model(cfg.get('model'), 'model', MODELS, scope)


def check_default_hook_name(hooks: dict, name: str) -> None:
    """A `default_hooks` entry without `type` builds nothing (mmengine: a bare `KeyError`):
    a misspelt hook name (`default_hooks.chekpoint.interval=5`) is named with the nearest
    hook of the config, or a known name without a type is asked for one."""
    hook = hooks[name]
    if not isinstance(hook, dict) or 'type' in hook:
        return
    if name in DEFAULT_HOOKS:
        raise ValueError(f'default_hooks.{name}: no type, so no hook can be built; add '
                         f'default_hooks.{name}.type ({DEFAULT_HOOKS[name]})')
    known = sorted(set(DEFAULT_HOOKS) | {n for n, h in hooks.items()
                                         if isinstance(h, dict) and 'type' in h})
    near = difflib.get_close_matches(name, known, n=1)
    hint = f'did you mean default_hooks.{near[0]}? ' if near else ''
    raise ValueError(f'default_hooks.{name}: no hook of that name and no type to build one; '
                     f'{hint}Default hooks: {", ".join(known)}.')


def check_run_keys(cfg: Config) -> None:
    """Raise ValueError at the first unknown key of the optimizer wrapper, the optimizer, a
    data loader, a loop or env_cfg."""
    from mmengine.registry import LOOPS, OPTIM_WRAPPERS, OPTIMIZERS
    scope = cfg.get('default_scope')
    wrapper = cfg.get('optim_wrapper')
    if isinstance(wrapper, dict) and not cfg.get('runner_type'):
        cls = resolve(OPTIM_WRAPPERS, wrapper.get('type', 'OptimWrapper'), scope)
        if cls is not None:
            refuse_unknown(wrapper, 'optim_wrapper', chained_keywords(cls) + (
                'constructor', 'paramwise_cfg'), cls.__name__)
        optimizer = wrapper.get('optimizer')
        if isinstance(optimizer, dict) and 'type' in optimizer:
            cls = resolve(OPTIMIZERS, optimizer['type'], scope)
            allowed = init_keywords(cls) if cls is not None else None
            if allowed is not None:
                refuse_unknown(optimizer, 'optim_wrapper.optimizer',
                               tuple(k for k in allowed if k != 'params'), cls.__name__)
    for phase in ('train', 'val', 'test'):
        loader = cfg.get(f'{phase}_dataloader')
        if isinstance(loader, dict):
            refuse_unknown(loader, f'{phase}_dataloader', loader_keywords(), 'a data loader')
        check_loop(cfg.get(f'{phase}_cfg'), phase, LOOPS, scope)
    check_env(cfg.get('env_cfg'))


def loader_keywords() -> tuple[str, ...]:
    from torch.utils.data import DataLoader
    return LOADER_KEYS + tuple(k for k in init_keywords(DataLoader) if k not in LOADER_KEYS)


def check_loop(loop, phase: str, registry, scope) -> None:
    """train_cfg / val_cfg / test_cfg against the loop class the runner builds from it."""
    if not isinstance(loop, dict):
        return
    from mmengine.runner import (EpochBasedTrainLoop, IterBasedTrainLoop, TestLoop,
                                 ValLoop)
    extra: tuple[str, ...] = ()
    if 'type' in loop:
        cls = resolve(registry, loop['type'], scope)
    elif phase == 'train':
        extra = ('by_epoch',)
        cls = EpochBasedTrainLoop if loop.get('by_epoch', True) else IterBasedTrainLoop
    else:
        cls = ValLoop if phase == 'val' else TestLoop
    allowed = init_keywords(cls) if cls is not None else None
    if allowed is not None:
        own = tuple(k for k in allowed if k not in ('runner', 'dataloader', 'evaluator'))
        refuse_unknown(loop, f'{phase}_cfg', own + extra, cls.__name__)


def check_env(env) -> None:
    """env_cfg, its dist_cfg (mmengine's backend keys, then torch's init_process_group) and
    its mp_cfg."""
    if not isinstance(env, dict):
        return
    refuse_unknown(env, 'env_cfg', ENV_KEYS, 'env_cfg')
    if isinstance(env.get('mp_cfg'), dict):
        refuse_unknown(env['mp_cfg'], 'env_cfg.mp_cfg', MP_KEYS, 'env_cfg.mp_cfg')
    if isinstance(env.get('dist_cfg'), dict):
        import torch.distributed as dist
        torch_keys = init_keywords(dist.init_process_group, function=True) or ()
        refuse_unknown(env['dist_cfg'], 'env_cfg.dist_cfg', ('backend', 'init_backend') + tuple(
            k for k in torch_keys if k not in ('backend', 'world_size', 'rank')
            and not k.startswith('_')),
            'env_cfg.dist_cfg')


def walk_model(node, key: str, registry, scope) -> None:
    if isinstance(node, dict):
        if 'type' in node:
            check_keys(node, key, registry, scope, only_own=True)
        for k, v in node.items():
            walk_model(v, f'{key}.{k}', registry, scope)
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            walk_model(v, f'{key}.{i}', registry, scope)


def check_keys(node, key: str, registry, scope, only_own: bool) -> None:
    """Check one `dict(type=...)` against its class's `__init__` (when the class takes no
    **kwargs, or passes them nowhere useful: mmengine's CheckpointHook); with `only_own`,
    only classes of peco_mm (host classes often take and forward **kwargs)."""
    if not isinstance(node, dict) or 'type' not in node:
        return
    cls = resolve(registry, node['type'], scope)
    if cls is None and registry.name == 'hook' and isinstance(node['type'], str):
        raise ValueError(unknown_type(registry, node['type'], scope, key))
    if cls is None or (only_own and not cls.__module__.startswith('peco_mm.')):
        return
    allowed = init_keywords(cls)
    if allowed is not None:
        refuse_unknown(node, key, allowed, cls.__name__)
    arch_keys = getattr(cls, 'ARCH_KEYS', None)
    if arch_keys and isinstance(node.get('arch'), dict):
        refuse_unknown(node['arch'], f'{key}.arch', arch_keys, f'{cls.__name__} arch')


def resolve(registry, type_, scope):
    """The class a config's `type` builds, or None when it cannot be found (the runner then
    reports the unknown type itself)."""
    if inspect.isclass(type_):
        return type_
    from ..registry import real_class
    try:
        with registry.switch_scope_and_registry(scope) as reg:
            cls = real_class(reg, str(type_))
    except Exception:  # noqa: BLE001 (an unknown scope or type)
        return None
    return cls if inspect.isclass(cls) else None


def unknown_type(registry, type_: str, scope, key: str) -> str:
    """`key.type=...` is not registered: the message, with the nearest registered names (this
    scope's, mmengine's own, and the other scopes' as `scope.Name`)."""
    with registry.switch_scope_and_registry(scope) as reg:
        names, root = set(reg.module_dict), reg
        while root.parent is not None:
            root = root.parent
            names |= set(root.module_dict)
        for child_scope, child in root.children.items():
            names |= {f'{child_scope}.{n}' for n in child.module_dict if n not in names}
    near = difflib.get_close_matches(type_, sorted(names), n=3, cutoff=0.6)
    hint = f" Did you mean {' or '.join(repr(n) for n in near)}?" if near else ''
    return (f'{key}.type={type_!r}: no {registry.name} of that name is registered (scope '
            f'{scope!r}; custom_imports must import the module that registers it).{hint}')


def chained_keywords(cls) -> tuple[str, ...]:
    """The keyword arguments of `cls` and of each base class its **kwargs go on to (mmengine's
    AmpOptimWrapper passes them to OptimWrapper)."""
    out: list[str] = []
    for base in cls.__mro__:
        if base is object or '__init__' not in vars(base):
            continue
        params = inspect.signature(base.__init__).parameters
        out += [p for p, v in params.items() if p != 'self' and p not in out
                and v.kind in (v.POSITIONAL_OR_KEYWORD, v.KEYWORD_ONLY)]
        if not any(v.kind == v.VAR_KEYWORD for v in params.values()):
            break
    return tuple(out)


def init_keywords(cls, function: bool = False) -> tuple[str, ...] | None:
    """The keyword arguments `cls(...)` accepts, or None when it takes **kwargs that it may
    use (mmengine's CheckpointHook forwards them to `save_checkpoint`, which takes none
    besides those the hook passes itself: its named arguments are the complete list)."""
    from mmengine.hooks import CheckpointHook
    params = inspect.signature(cls if function else cls.__init__).parameters
    named = tuple(p for p, v in params.items() if p != 'self' and v.kind in (
        v.POSITIONAL_OR_KEYWORD, v.KEYWORD_ONLY))
    takes_any = any(v.kind == v.VAR_KEYWORD for v in params.values())
    if function or not issubclass(cls, CheckpointHook):
        return None if takes_any else named
    if cls is not CheckpointHook and takes_any:  # a subclass passing the rest on
        named += tuple(k for k in init_keywords(CheckpointHook) if k not in named)
    return named


def refuse_unknown(node: dict, key: str, allowed, what: str) -> None:
    for k in node:
        if k in BUILDER_KEYS or k in allowed:
            continue
        near = difflib.get_close_matches(str(k), allowed, n=1)
        hint = f'did you mean {key}.{near[0]}? ' if near else ''
        raise ValueError(f'{key}.{k}: unknown key for {what}; {hint}Allowed: '
                         f'{", ".join(allowed)}.')
