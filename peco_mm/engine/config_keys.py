"""Unknown keys in a config are refused before the runner is built, naming the key and the
nearest valid one.

mmengine passes a hook's or a model part's config as keyword arguments: a misspelt key either
fails late (`default_hooks.checkpoint.intervl=5` reaches `CheckpointHook(**kwargs)` and breaks
the first save, after a whole epoch) or is ignored (`model.backbone.arch.num_layer=2` leaves
the architecture's 12 blocks). `check_config_keys(cfg)` compares the keys of every hook
(`default_hooks`, `custom_hooks`) and of every peco_mm part of the model (including the
backbone's `arch` dict) with the signature of the class they build.
"""
from __future__ import annotations

import difflib
import inspect

from mmengine.config import Config

# keys that mmengine's builders consume themselves, never passed to the class
BUILDER_KEYS = ('type', 'priority', '_scope_')


def check_config_keys(cfg: Config) -> None:
    """Raise ValueError at the first unknown key of a hook or of a peco_mm model part."""
    from mmengine.registry import HOOKS, MODELS
    scope = cfg.get('default_scope')
    for name, hook in (cfg.get('default_hooks') or {}).items():
        check_keys(hook, f'default_hooks.{name}', HOOKS, scope, only_own=False)
    for i, hook in enumerate(cfg.get('custom_hooks') or []):
        check_keys(hook, f'custom_hooks.{i}', HOOKS, scope, only_own=False)
    walk_model(cfg.get('model'), 'model', MODELS, scope)


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


def init_keywords(cls) -> tuple[str, ...] | None:
    """The keyword arguments `cls(...)` accepts, or None when it takes **kwargs that it may
    use (mmengine's CheckpointHook forwards them to `save_checkpoint`, which takes none
    besides those the hook passes itself: its named arguments are the complete list)."""
    from mmengine.hooks import CheckpointHook
    params = inspect.signature(cls.__init__).parameters
    named = tuple(p for p, v in params.items() if p != 'self' and v.kind in (
        v.POSITIONAL_OR_KEYWORD, v.KEYWORD_ONLY))
    takes_any = any(v.kind == v.VAR_KEYWORD for v in params.values())
    if not issubclass(cls, CheckpointHook):
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
