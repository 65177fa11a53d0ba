"""Support for the tools that chain several runs in one process (tools/study.py, which
`make demo` runs): their configs' work-dir paths moved under the user's --work-dir, and the
other tools called as a user calls them; and the results file a tool writes with --out."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / 'tools'


def walk_strings(node, fn) -> None:
    """Replace every string s in a config (or a dict / list in it) by fn(s), in place."""
    for k, v in list(node.items() if hasattr(node, 'items') else enumerate(node)):
        if isinstance(v, str):
            node[k] = fn(v)
        elif isinstance(v, (dict, list)):
            walk_strings(v, fn)


def move_root(cfg, old: str, new: str) -> None:
    """Every path of a config under `old` (the folder its shipped form writes to) moved under
    `new`, in place."""
    walk_strings(cfg, lambda s: new + s[len(old):] if s == old or s.startswith(old + '/')
                 else s)


def call_tool(name: str, argv: list):
    """tools/<name>.py's main(argv), as a user runs it: (its return value, what it printed)."""
    spec = importlib.util.spec_from_file_location(name, TOOLS / f'{name}.py')
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    with contextlib.redirect_stdout(io.StringIO()) as log:
        out = tool.main([str(a) for a in argv])
    return out, log.getvalue()


def plain_number(value):
    """json's `default` for the numpy scalars metrics come as (numpy 2 keeps mmseg's float32
    mIoU a float32, which json refuses; numpy 1 made it a float64, a float)."""
    import numpy as np
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f'{type(value).__name__} is not JSON serializable')


def number_or_text(value):
    """`plain_number`, and any other value JSON cannot hold (a torch version, a path) as text."""
    try:
        return plain_number(value)
    except TypeError:
        return str(value)


def save_json(path: str | None, results, indent: int = 1) -> None:
    """A tool's results as JSON to `path` (its --out), when one is given: numpy numbers as
    numbers, other values JSON cannot hold as their text."""
    if path:
        with open(path, 'w') as f:
            json.dump(results, f, indent=indent, default=number_or_text)
