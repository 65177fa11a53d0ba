"""What a checkpoint's plain data may rebuild: a closed schema, never a registry.

A checkpoint stores what rebuilds a model as plain dicts (`meta.tokenizer_parts`, the old
`meta.tokenizer_arch`, the `model` of the config text `meta.cfg`, a converted file's
`meta.pecovit_args`). A registry is the wrong boundary for such data: a registered builder can
download or run code (`mmpretrain.AutoModelForCausalLM` with `trust_remote_code`), read
pickles or execute config files, and mmengine's `Registry.get` imports a name it does not
find (`'LocalVisBackend'` in MODELS is imported as a module).

So a part read from a file is checked against an explicit schema the caller gives, one slot
at a time (`check_part`): a dict whose `type` is one of the slot's allowed names (a dict name
-> `StoredPart`, the class itself: nothing is looked up) and whose other keys are arguments
of that class (`StoredPart.args`, read off its `__init__` signature, less the arguments that
take files or other parts), each a plain value (`check_plain`): a number, True / False /
None, a plain word (letters, digits, `_` and `-`; so no path, URL or module name), or a
short list or tuple of those; a flat dict of them only for the arguments the schema names
(a ViT's `arch`), never with a `type`. Anything else is refused with one line naming the
source, the key and what is allowed. The schema of the tokenizer's parts is
`peco_mm.tokenizer.stored_parts.STORED_PARTS`.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

from .stored_config import StoredConfigError

# a string argument read from a file: a plain word, e.g. 'base', 'avg_featmap', 'deit-tiny'
WORD = re.compile(r'[A-Za-z0-9_][A-Za-z0-9_\-]{0,63}')
MAX_ITEMS = 64  # of a list, tuple or dict argument (channel_mult, out_indices, arch)
LEAF_TYPES = (bool, int, float, type(None))
SEE = '(see docs/security.md, "What a checkpoint may rebuild")'


@dataclass(frozen=True)
class StoredPart:
    """A class a file may name, and the arguments a file may give it."""
    cls: type
    args: frozenset[str]
    dict_args: frozenset[str] = frozenset()  # may be a flat dict of plain values


def stored_part(cls: type, *forwards_to: type, exclude: tuple[str, ...] = (),
                dict_args: tuple[str, ...] = ()) -> StoredPart:
    """The `StoredPart` of `cls`: the named parameters of its `__init__` (and of the classes
    its `**kwargs` go to, `forwards_to`), less `exclude`."""
    names = set()
    for c in (cls, *forwards_to):
        params = inspect.signature(c.__init__).parameters.values()
        names |= {p.name for p in params if p.name != 'self' and p.kind in (
            p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return StoredPart(cls, frozenset(names - set(exclude)), frozenset(dict_args))


def check_part(cfg, slot: str, allowed: dict[str, StoredPart], where: str) -> StoredPart:
    """The schema entry of the part config `cfg` read from a file at `where` (the file and
    the key, e.g. 'tok.pth meta.tokenizer_parts.encoder'), after checking its type and every
    argument; a StoredConfigError (one line) otherwise."""
    names = ', '.join(allowed)
    if not isinstance(cfg, dict):
        raise StoredConfigError(f'{where}: a {type(cfg).__name__}, not a part config '
                                f'dict(type=..., ...); allowed types: {names} {SEE}')
    name = cfg.get('type')
    if not isinstance(name, str) or name not in allowed:
        shown = repr(name)[:80] if isinstance(name, str) else f'a {type(name).__name__}'
        raise StoredConfigError(f'{where}.type: {shown} is not a part a checkpoint may '
                                f'rebuild as the {slot}; allowed: {names}; nothing a '
                                f'checkpoint names is looked up in a registry {SEE}')
    part = allowed[name]
    check_args({k: v for k, v in cfg.items() if k != 'type'}, part, where)
    return part


def check_args(args, part: StoredPart, where: str) -> None:
    """Every key of `args` an argument of `part`, every value plain (`check_plain`)."""
    if not isinstance(args, dict):
        raise StoredConfigError(f'{where}: a {type(args).__name__}, not a dict of the '
                                f'arguments of {part.cls.__name__} {SEE}')
    for key, value in args.items():
        if not isinstance(key, str) or key not in part.args:
            raise StoredConfigError(
                f'{where}.{str(key)[:80]}: not an argument a checkpoint may give '
                f'{part.cls.__name__}; allowed: {", ".join(sorted(part.args))} {SEE}')
        check_plain(value, f'{where}.{key}', key in part.dict_args)


def check_plain(value, where: str, flat_dict: bool = False) -> None:
    """A number, True / False / None, a plain word, or a list or tuple (at most `MAX_ITEMS`)
    of those; with `flat_dict`, also a dict of plain words to those (no `type`)."""
    if flat_dict and type(value) is dict:
        if len(value) > MAX_ITEMS:
            raise StoredConfigError(f'{where}: {len(value)} entries (at most {MAX_ITEMS})')
        for k, v in value.items():
            if not (isinstance(k, str) and WORD.fullmatch(k)) or k in ('type', '_scope_'):
                raise StoredConfigError(f'{where}: key {str(k)[:80]!r} is not a plain '
                                        f'argument name {SEE}')
            check_plain(v, f'{where}.{k}')
        return
    if type(value) in (list, tuple):
        if len(value) > MAX_ITEMS:
            raise StoredConfigError(f'{where}: {len(value)} items (at most {MAX_ITEMS})')
        for i, v in enumerate(value):
            _check_leaf(v, f'{where}.{i}')
        return
    _check_leaf(value, where)


def _check_leaf(value, where: str) -> None:
    if type(value) in LEAF_TYPES:
        return
    if type(value) is str:
        if not WORD.fullmatch(value):
            raise StoredConfigError(
                f'{where}: {value[:60]!r} is not a plain word (letters, digits, _ and -, at '
                'most 64): a path, URL, module name or other text is never an argument read '
                f'from a checkpoint {SEE}')
        return
    raise StoredConfigError(f'{where}: a {type(value).__name__} is not a plain value (a '
                            'number, True / False / None, a plain word, or a list of them) '
                            f'{SEE}')
