"""What the launcher changed in a config: key, before, after, why.

`snapshot(cfg)` copies a config's containers; `diff(before, after)` lists the keys whose value
differs, as dotted config keys (list items by index, as `--cfg-options` names them). Dicts
are compared key by key (a class swapped for another with the same arguments is a change of
`type`); a dict wrapped in another (a dataset in BadSampleGuard) is one change of the whole
dict; items appended to a list are one change each. `Change.line()` is its log line;
`block(changes)` the log's block of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ABSENT = type('Absent', (), {'__repr__': lambda self: '(unset)'})()  # a key not in the config
SHORT = 90  # characters of a value in a log line


@dataclass
class Change:
    """One key of the user's config changed by the launcher."""
    key: str  # e.g. 'default_hooks.checkpoint.type'
    before: Any  # ABSENT when the launcher added the key
    after: Any  # ABSENT when it removed it
    why: str = ''

    def line(self) -> str:
        before = brief(self.before)
        after = brief(self.after, inner=self.before)
        return f'{self.key}: {before} -> {after} ({self.why})'


def snapshot(node):
    """A copy of a config's dicts and lists (leaves shared): what `diff` compares later."""
    if isinstance(node, dict):
        return {k: snapshot(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return type(node)(snapshot(v) for v in node) if type(node) in (list, tuple) else [
            snapshot(v) for v in node]
    return node


def diff(before, after, key: str = '') -> list[tuple[str, Any, Any]]:
    """(dotted key, before, after) of every value that differs between two snapshots."""
    if _same(before, after):
        return []
    if isinstance(before, dict) and isinstance(after, dict) and _alike(before, after):
        out = []
        for k in list(before) + [k for k in after if k not in before]:
            out += diff(before.get(k, ABSENT), after.get(k, ABSENT), _join(key, k))
        return out
    if isinstance(after, (list, tuple)) and (before is ABSENT or before is None):
        before = []  # a list the launcher starts: one change per item it adds
    if isinstance(before, (list, tuple)) and isinstance(after, (list, tuple)) and (
            len(before) <= len(after) and all(
                _same(b, a) or (isinstance(b, dict) and isinstance(a, dict))
                for b, a in zip(before, after))):
        out = []  # items changed in place or appended: one change each
        for i, a in enumerate(after):
            out += diff(before[i] if i < len(before) else ABSENT, a, _join(key, i))
        return out
    return [(key, before, after)]


def _alike(before: dict, after: dict) -> bool:
    """Compared key by key: the same type, or another type with the same arguments (a class
    swapped); a dict wrapped in another (a dataset in BadSampleGuard) is one change."""
    return before.get('type') == after.get('type') or set(before) == set(after) or bool(
        (set(before) & set(after)) - {'type', '_scope_'})


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 (values that do not compare, e.g. tensors)
        return a is b


def _join(key: str, k) -> str:
    return f'{key}.{k}' if key else str(k)


def brief(value, inner=ABSENT, limit: int = SHORT) -> str:
    """A short text of a config value: `Type(key=value, ...)` for a dict with a type; a part
    equal to `inner` (the value before, e.g. a wrapped dataset) as `<as before>`."""
    text = _brief(value, inner)
    return text if len(text) <= limit else text[:limit - 1] + '…'


def _brief(value, inner) -> str:
    if inner is not ABSENT and isinstance(inner, dict) and value is not inner and _same(
            value, inner):
        return '<as before>'
    if isinstance(value, dict):
        args = ', '.join(f'{k}={_brief(v, inner)}' for k, v in value.items() if k != 'type')
        name = value.get('type')
        name = getattr(name, '__name__', name)
        return f'{name}({args})' if name else f'dict({args})'
    if isinstance(value, (list, tuple)):
        items = ', '.join(_brief(v, inner) for v in value)
        return f'[{items}]' if isinstance(value, list) else f'({items})'
    if isinstance(value, type):
        return value.__name__
    return repr(value)


def block(changes: list[Change]) -> str:
    """The log's block: a heading and one line per change (or a line saying there was none)."""
    if not changes:
        return 'The launcher changed no key of this config.'
    n = len(changes)
    lines = [f'The launcher changed {n} key{"s" if n > 1 else ""} of this config '
             '(key: before -> after (why)):']
    return '\n'.join(lines + [f'  {c.line()}' for c in changes])
