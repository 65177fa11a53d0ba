"""The weights of a pickled `nn.Module`, read without running any of it.

Some releases are a whole module saved with `torch.save(module)` rather than a state dict:
OpenAI's DALL-E `encoder.pkl` and `decoder.pkl` (the tokenizer BEiT uses) are. Such a file
names the classes of the module and of every submodule; a plain `torch.load` imports them
and runs their code, and whatever else the file names. The weights-only unpickler refuses it.

`read_module_state_dict` reads it through torch's weights-only unpickler all the same: every
class or function the file names is allowed for this one call as an `InertStandIn`, a class
that only keeps the state it is given. torch's own allowlist still comes first, so tensors
are rebuilt as torch rebuilds them; builtins are left to it (a module's `set` passes, `exec`
does not), and it still refuses anything from `os` and `sys`. No class of the
file is imported and no code of it runs. The state dict is then read off the tree of
stand-ins: each module's `_parameters` and persistent `_buffers`, under the key names
`module.state_dict()` would give.
"""
from __future__ import annotations

import os
import pickle
import pickletools
import zipfile

import torch

from .reader import ZIP_MAGIC, fetch_url, file_problem, is_url, unwrap

STRING_OPS = {'SHORT_BINUNICODE', 'BINUNICODE', 'BINUNICODE8', 'UNICODE', 'SHORT_BINSTRING',
              'BINSTRING', 'STRING'}
# left to torch's own allowlist (a module's `set` passes, `exec` / `eval` are refused)
BUILTIN_MODULES = ('builtins', '__builtin__')
LEGACY_PICKLES = 4  # a legacy torch file: magic number, protocol, system info, the object


class InertStandIn:
    """What every class a pickled module names becomes: it accepts any arguments and keeps
    the state it is given, and does nothing else."""
    pickled_name = ''

    def __new__(cls, *args, **kwargs):
        return super().__new__(cls)

    def __init__(self, *args, **kwargs) -> None:
        self.args = args

    def __setstate__(self, state) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (dict state, slot state)
            state = {**(state[0] or {}), **(state[1] or {})}
        self.state = state if isinstance(state, dict) else {}


def read_module_state_dict(path: str) -> dict[str, torch.Tensor]:
    """The state dict of the module pickled in `path` (a local file or an http(s):// URL),
    nothing of the file executed. A file that holds a state dict instead (plain or nested as
    `read_checkpoint` reads it) gives that state dict."""
    path = os.fspath(path)
    if is_url(path):
        path = fetch_url(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f'weights file not found: {path}')
    problem = file_problem(path)
    if problem:
        raise ValueError(f'{path}: {problem}')
    stand_ins = [(type(name.rsplit('.', 1)[-1], (InertStandIn,), {'pickled_name': name}), name)
                 for name in sorted(pickled_globals(path))
                 if name.split('.', 1)[0] not in BUILTIN_MODULES]
    try:
        with torch.serialization.safe_globals(stand_ins):
            root = torch.load(path, map_location='cpu', weights_only=True)
    except pickle.UnpicklingError as err:
        if 'persistent_load of storage' in str(err):  # a legacy file's module source records
            raise ValueError(
                f'{path}: a module pickled in the legacy format (torch < 1.6) carries its '
                'source code, which the weights-only unpickler does not read; in an '
                'environment you trust, save its state_dict() and give that file') from None
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        reason = next((ln for ln in lines if 'GLOBAL' in ln or 'blocked' in ln),
                      lines[-1] if lines else type(err).__name__)
        raise ValueError(f'{path}: refused by the weights-only unpickler ({reason[:200]})'
                         ) from None
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


def pickled_globals(path: str) -> set[str]:
    """'module.name' of every global the file's pickles name, read from their opcodes
    (`pickletools`, which runs nothing): GLOBAL's argument, and for STACK_GLOBAL the two
    strings pushed before it."""
    with open(path, 'rb') as f:
        is_zip = f.read(len(ZIP_MAGIC)) == ZIP_MAGIC
    if is_zip:
        with zipfile.ZipFile(path) as zf:
            data = [n for n in zf.namelist() if n.endswith('/data.pkl') or n == 'data.pkl']
            if not data:
                raise ValueError(f'{path}: a zip archive without data.pkl, not a torch file')
            streams = [zf.read(data[0])]
        return _globals_in(streams, count=1)
    with open(path, 'rb') as f:
        return _globals_in([f], count=LEGACY_PICKLES)


def _globals_in(streams, count: int) -> set[str]:
    import io
    names: set[str] = set()
    for stream in streams:
        f = io.BytesIO(stream) if isinstance(stream, bytes) else stream
        for _ in range(count):
            strings: list[str] = []  # the strings pushed so far, in order
            memo: dict = {}
            top = None  # the string on top of the stack, when the last op left one there
            for op, arg, _pos in pickletools.genops(f):
                kept = None
                if op.name == 'GLOBAL':
                    names.add(arg.replace(' ', '.', 1))
                elif op.name == 'STACK_GLOBAL' and len(strings) >= 2:
                    names.add(f'{strings[-2]}.{strings[-1]}')
                elif op.name in STRING_OPS:
                    kept = arg if isinstance(arg, str) else str(arg)
                    strings.append(kept)
                elif op.name == 'MEMOIZE':
                    memo[len(memo)] = kept = top
                elif op.name in ('PUT', 'BINPUT', 'LONG_BINPUT'):
                    memo[arg] = kept = top
                elif op.name in ('GET', 'BINGET', 'LONG_BINGET') and memo.get(arg) is not None:
                    kept = memo[arg]
                    strings.append(kept)
                top = kept
    return names
