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


def module_state(node: InertStandIn, prefix: str = '') -> dict[str, torch.Tensor]:
    """`state_dict()` of a pickled module's stand-in tree: parameters, then persistent
    buffers, then the submodules' under '<name>.' (the order nn.Module uses)."""
    state = getattr(node, 'state', {})
    out: dict[str, torch.Tensor] = {}
    transient = state.get('_non_persistent_buffers_set') or ()
    for group in ('_parameters', '_buffers'):
        for name, value in (state.get(group) or {}).items():
            if torch.is_tensor(value) and not (group == '_buffers' and name in transient):
                out[prefix + name] = value.detach() if group == '_parameters' else value
    for name, child in (state.get('_modules') or {}).items():
        if isinstance(child, InertStandIn):
            out.update(module_state(child, f'{prefix}{name}.'))
    return out
