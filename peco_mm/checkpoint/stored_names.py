"""The registry names a checkpoint's plain data may hold.

A checkpoint stores what rebuilds a model as plain dicts (`meta.tokenizer_parts`, the old
`meta.tokenizer_arch`, the `model` of the config text `meta.cfg`). Plain data can still make
mmengine import and run code: `Registry.get` resolves a `type` it does not know as a dotted
path (`'package.module.function'`, imported, then called by `build_from_cfg`) or a module
name, and `_scope_` (or the scope of `'scope.Name'`) makes it import `<scope>.registry`.

`check_registered_names` refuses, before anything is built, every `type` that is not a name
registered in the registries already loaded (mmengine's roots, where peco_mm registers, and
the child registries of the hosts imported so far), written plain (`'CNNEncoder'`) or scoped
(`'mmpretrain.VisionTransformer'`), and every `_scope_` that is not the scope of a loaded
registry. Nothing is imported to find out. Nested dicts, lists and tuples are checked too;
a structure shared many times is walked once.
"""
from __future__ import annotations

from .stored_config import StoredConfigError

# deeper than any model config; a deeper one is refused, not walked
MAX_DEPTH = 64


def check_registered_names(data, source: str) -> None:
    """Raise StoredConfigError (one line: `source`, the key, the name) when `data` holds a
    `type` that no loaded registry holds, a `type` that is not a string, or a `_scope_`
    that is not a loaded registry's scope.

    Args:
        data: plain data read from a checkpoint (dicts, lists, tuples, ...).
        source: the file and where in it, e.g. 'tok.pth meta.tokenizer_parts'.
    """
    names, scopes = registered_names()
    seen: set[int] = set()
    todo = [(data, '', 0)]
    while todo:
        node, key, depth = todo.pop()
        if not isinstance(node, (dict, list, tuple)) or id(node) in seen:
            continue
        seen.add(id(node))
        if depth > MAX_DEPTH:
            raise StoredConfigError(f'{source}{key}: nested deeper than {MAX_DEPTH} levels; '
                                    'not a model config')
        if isinstance(node, dict):
            _check_entry(node, f'{source}{key}', names, scopes)
            items = node.items()
        else:
            items = enumerate(node)
        todo += [(v, f'{key}.{k}', depth + 1) for k, v in items]


def _check_entry(node: dict, where: str, names: frozenset, scopes: frozenset) -> None:
    tail = ('; nothing a checkpoint names is imported or built (see docs/security.md, '
            '"Registry names in stored data")')
    if '_scope_' in node and not (isinstance(node['_scope_'], str)
                                  and node['_scope_'] in scopes):
        raise StoredConfigError(f'{where}._scope_: {node["_scope_"]!r} is not the scope of a '
                                f'loaded registry ({", ".join(sorted(scopes))}){tail}')
    if 'type' not in node:
        return
    name = node['type']
    if not isinstance(name, str):
        raise StoredConfigError(f'{where}.type: {type(name).__name__} {name!r:.80} is not a '
                                f'registered name{tail}')
    if name not in names:
        raise StoredConfigError(f'{where}.type: {name!r} is not a name registered by peco_mm '
                                f'or a loaded host{tail}')


def registered_names() -> tuple[frozenset, frozenset]:
    """(every name of the loaded registries, plain and as 'scope.Name'; their scopes), read
    from mmengine's root registries and their children, importing nothing."""
    import mmengine.registry as roots
    from mmengine.registry import Registry
    names, scopes = set(), set()
    todo = [r for r in vars(roots).values() if isinstance(r, Registry)]
    while todo:
        registry = todo.pop()
        scopes.add(registry.scope)
        for name in registry.module_dict:
            names.update((name, f'{registry.scope}.{name}'))
        todo += list(registry.children.values())
    return frozenset(names), frozenset(scopes)
