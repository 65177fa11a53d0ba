"""The weights of a pickled `nn.Module`, read without running any of it.

OpenAI releases DALL-E's encoder and decoder (BEiT's tokenizer) as whole modules saved with
`torch.save(module)`. `read_module_state_dict` reads such a file through the one gate
(`read_checkpoint` with `inert_objects=True`: every class the file names becomes an inert
stand-in, see `peco_mm.checkpoint.inert`), then reads the state dict off the tree of
stand-ins: each module's `_parameters` and persistent `_buffers`, under the key names
`module.state_dict()` would give.
"""
from __future__ import annotations

import torch

from .inert import InertStandIn
from .reader import log, read_checkpoint, unwrap


def read_module_state_dict(path: str) -> dict[str, torch.Tensor]:
    """The state dict of the module pickled in `path` (a local file or an http(s):// URL),
    nothing of the file executed. A file that holds a state dict instead (plain or nested as
    `read_checkpoint` reads it) gives that state dict."""
    root = read_checkpoint(path, inert_objects=True, warn=log)
    if isinstance(root, InertStandIn):
        state = module_state(root)
        if not state:
            raise ValueError(f'{path}: the pickled {root.pickled_name} holds no parameters or '
                             'buffers')
        return state
    if isinstance(root, dict):
        return unwrap(root)[0]
    raise ValueError(f'{path}: expected a pickled nn.Module or a state dict, found '
                     f'{type(root).__name__}')


def module_state(root: InertStandIn) -> dict[str, torch.Tensor]:
    """`state_dict()` of a pickled module's stand-in tree: parameters, then persistent
    buffers, then the submodules' under '<name>.' (the order nn.Module uses). Each stand-in
    is walked once, with a stack of its own: a submodule shared by several parents gives its
    tensors under the first name only, so neither sharing nor depth can make the walk run
    away."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    todo = [(root, '')]
    while todo:
        node, prefix = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        state = getattr(node, 'state', None)
        state = state if isinstance(state, dict) else {}
        out.update(_own_tensors(state, prefix))
        children = state.get('_modules')
        children = children.items() if isinstance(children, dict) else ()
        todo += reversed([(child, f'{prefix}{name}.') for name, child in children
                          if isinstance(child, InertStandIn)])
    return out


def _own_tensors(state: dict, prefix: str) -> dict[str, torch.Tensor]:
    """One module's parameters and persistent buffers, from its pickled `__dict__`."""
    out = {}
    transient = state.get('_non_persistent_buffers_set')
    transient = transient if isinstance(transient, (set, frozenset, list, tuple)) else ()
    for group in ('_parameters', '_buffers'):
        values = state.get(group)
        for name, value in (values.items() if isinstance(values, dict) else ()):
            if torch.is_tensor(value) and not (group == '_buffers' and name in transient):
                out[prefix + name] = value.detach() if group == '_parameters' else value
    return out
