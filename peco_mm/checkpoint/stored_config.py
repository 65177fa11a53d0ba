"""Config text stored in a checkpoint, read as data.

mmengine's Runner stores the run's config in every checkpoint as Python text
(`meta['cfg']`, `Config.pretty_text`; mmcv 1.x runs stored `meta['config']`). mmengine's
`Config` reads such text by executing it, so a crafted checkpoint could run any code through
it. `parse_config_text` reads the text with Python's `ast` instead and accepts only what
`pretty_text` writes:

- module-level assignments `name = value` (one plain name per assignment);
- values that are literals (numbers, strings, bytes, True / False / None, tuples, lists,
  dicts, sets, a leading + or - on a number) or `dict(key=value, ...)` with keyword
  arguments (and at most one `{...}` before them, as pretty_text writes keys that are not
  names).

Everything else is refused with a `StoredConfigError` that names the source, the line and
the construct: imports, names, attribute access, any other call, lambdas, comprehensions,
f-strings, operators, and the keys that make mmengine read more than the text, `_base_`
(another file) and `custom_imports` (modules to import) unless it names only `peco_mm`, which
is imported already. Nothing is imported or executed; a refused text is never half-read.
"""
from __future__ import annotations

import ast

# the most text a stored config may hold (pretty_text of a paper config is ~15 kB)
MAX_CHARS = 4_000_000
# `custom_imports` may name these (and their submodules): imported before any config is read
ALREADY_IMPORTED = ('peco_mm',)


class StoredConfigError(ValueError):
    """Config text that is not plain data; the message names the source, line and construct."""


def parse_config_text(text: str, source: str) -> dict:
    """The variables of config text as plain Python values (dicts, lists, tuples, ...).

    Args:
        text: the config text (e.g. a checkpoint's `meta['cfg']`).
        source: where it comes from, for the error message (e.g. 'ckpt.pth meta.cfg').

    Raises:
        StoredConfigError: the text is not plain data (see the module docstring).
    """
    if not isinstance(text, str):
        raise StoredConfigError(f'{source}: expected config text, got {type(text).__name__}')
    if len(text) > MAX_CHARS:
        raise StoredConfigError(f'{source}: {len(text)} characters of config text (at most '
                                f'{MAX_CHARS} are read)')
    try:
        tree = ast.parse(text, mode='exec')
    except SyntaxError as err:
        raise StoredConfigError(f'{source} line {err.lineno}: not valid config text '
                                f'({err.msg})') from None
    except (RecursionError, MemoryError, ValueError) as err:
        raise StoredConfigError(f'{source}: unreadable config text ({type(err).__name__})'
                                ) from None
    out = {}
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)):
            _refuse(source, stmt, _describe(stmt))
        name = stmt.targets[0].id
        if name == '_base_':
            _refuse(source, stmt, '_base_ (inherits another file)')
        try:
            value = _value(stmt.value, source)
        except RecursionError:
            _refuse(source, stmt, 'values nested too deeply')
        if name == 'custom_imports':
            _check_custom_imports(value, source, stmt)
        out[name] = value
    return out


def _value(node: ast.AST, source: str):
    """The Python value of a literal node, `dict(k=v)` included; refuses anything else."""
    if isinstance(node, ast.Constant):
        if node.value is Ellipsis:
            _refuse(source, node, '...')
        return node.value
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [_value(e, source) for e in node.elts]
        kind = {ast.Tuple: tuple, ast.List: list, ast.Set: set}[type(node)]
        try:
            return kind(items)
        except TypeError:  # an unhashable set member
            _refuse(source, node, 'a set of unhashable values')
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            _refuse(source, node, '** unpacking')
        try:
            return {_value(k, source): _value(v, source) for k, v in zip(node.keys, node.values)}
        except TypeError:
            _refuse(source, node, 'an unhashable dict key')
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd))
            and isinstance(node.operand, ast.Constant)
            and type(node.operand.value) in (int, float, complex)):
        return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == 'dict'):
        # pretty_text writes a dict whose keys are not names as dict({'a.b': ...})
        if len(node.args) > 1 or (node.args and not isinstance(node.args[0], ast.Dict)):
            _refuse(source, node, 'dict() with positional arguments other than one {...}')
        if any(kw.arg is None for kw in node.keywords):
            _refuse(source, node, '** unpacking')
        out = _value(node.args[0], source) if node.args else {}
        out.update({kw.arg: _value(kw.value, source) for kw in node.keywords})
        return out
    _refuse(source, node, _describe(node))


def _check_custom_imports(value, source: str, stmt: ast.AST) -> None:
    mods = value.get('imports') if isinstance(value, dict) else None
    mods = [mods] if isinstance(mods, str) else mods
    if not isinstance(mods, (list, tuple)) or not all(isinstance(m, str) for m in mods):
        _refuse(source, stmt, 'custom_imports without a list of module names')
    other = [m for m in mods if m.split('.')[0] not in ALREADY_IMPORTED]
    if other:
        _refuse(source, stmt, f'custom_imports of {other} (only {list(ALREADY_IMPORTED)} may '
                'be named; nothing is imported from a stored config)')


def _describe(node: ast.AST) -> str:
    """A short name for a construct, for the error message."""
    if isinstance(node, ast.Call):
        return f'a call to {_dotted(node)}'
    if isinstance(node, ast.Name):
        return f'the name {node.id!r}'
    if isinstance(node, ast.Attribute):
        return f'attribute access {_dotted(node)}'
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return 'an import'
    if isinstance(node, ast.JoinedStr):
        return 'an f-string'
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        return 'a comprehension'
    if isinstance(node, ast.Lambda):
        return 'a lambda'
    if isinstance(node, ast.Assign):
        return 'an assignment to something other than one plain name'
    if isinstance(node, ast.Expr):
        return f'a bare expression ({_describe(node.value)})'
    if isinstance(node, (ast.BinOp, ast.BoolOp, ast.Compare, ast.UnaryOp)):
        return f'an operator ({type(node).__name__})'
    return f'a {type(node).__name__} statement' if isinstance(node, ast.stmt) else \
        f'a {type(node).__name__} expression'


def _dotted(node: ast.AST) -> str:
    """`os.path.join`, `__import__().system()`: a call or attribute chain, written short."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f'{_dotted(node.value)}.{node.attr}'
    if isinstance(node, ast.Call):
        return f'{_dotted(node.func)}()'
    return '(...)'


def _refuse(source: str, node: ast.AST, what: str):
    line = getattr(node, 'lineno', None)
    raise StoredConfigError(
        f'{source}{f" line {line}" if line else ""}: {what} is not plain data; a stored '
        'config is read as data and nothing in it is run')


PLAIN_TYPES = (str, bytes, int, float, complex, bool, type(None))


def as_plain_data(value):
    """`value` (e.g. a ConfigDict) as plain dicts / lists / tuples of strings, numbers, bools
    and None, which the weights-only loader reads back; None when it holds anything else
    (a class, a function)."""
    if isinstance(value, PLAIN_TYPES):
        return value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, PLAIN_TYPES):
                return None
            out[k] = as_plain_data(v)
            if out[k] is None and v is not None:
                return None
        return out
    if isinstance(value, (list, tuple)):
        items = [as_plain_data(v) for v in value]
        if any(i is None and v is not None for i, v in zip(items, value)):
            return None
        return type(value)(items) if type(value) in (list, tuple) else list(items)
    return None
