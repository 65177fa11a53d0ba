"""Reading a pickle that holds Python objects besides tensors, without running any of them.

Training checkpoints often pickle more than weights: MAE's and DINO's save their argparse
namespace, and OpenAI releases DALL-E's encoder and decoder as whole modules saved with
`torch.save(module)`. Such a file names the classes of its objects; a plain `torch.load`
imports them and runs their code, and whatever else the file names. torch's weights-only
unpickler refuses the file instead.

`load_with_stand_ins` reads it through that same weights-only unpickler: every class or
function the file names (found from its pickle opcodes with `pickletools`, which runs
nothing) is allowed for this one call as an `InertStandIn`, a class that only keeps the
arguments and state it is given. torch's own allowlist still comes first, so tensors are
rebuilt as torch rebuilds them; builtins are left to it (a module's `set` passes, `exec`
does not), and it still refuses anything from `os` and `sys`. No class of the file is
imported and no code of it runs.
"""
from __future__ import annotations

import pickle
import pickletools
import zipfile

import torch

from .budget import LEGACY_PICKLES, is_torch_zip, torch_pickle_member

STRING_OPS = {'SHORT_BINUNICODE', 'BINUNICODE', 'BINUNICODE8', 'UNICODE', 'SHORT_BINSTRING',
              'BINSTRING', 'STRING'}
# left to torch's own allowlist (a module's `set` passes, `exec` / `eval` are refused)
BUILTIN_MODULES = ('builtins', '__builtin__')


class InertStandIn:
    """What every class or function a pickle names becomes: it accepts any arguments, keeps
    them and the state it is given, and does nothing else. `pickled_name` says what it
    stands in for; `used` whether the file built one."""
    pickled_name = ''
    used = False

    def __new__(cls, *args, **kwargs):
        cls.used = True
        return super().__new__(cls)

    def __init__(self, *args, **kwargs) -> None:
        self.args = args

    def __setstate__(self, state) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (dict state, slot state)
            state = {**(state[0] or {}), **(state[1] or {})}
        self.state = state if isinstance(state, dict) else {}

    def __repr__(self) -> str:
        return f'<inert {self.pickled_name}>'


def load_with_stand_ins(path: str, map_location='cpu') -> tuple[object, list[str]]:
    """(what `path` holds, with each pickled object an `InertStandIn`; the names of the
    classes and functions that were stood in for). torch's weights-only unpickler reads the
    file; its refusals (a builtin call, `os`, a legacy module's source code) propagate as
    `pickle.UnpicklingError`."""
    allowed = allowed_names()
    try:
        names = pickled_globals(path)
    except (ValueError, EOFError) as err:  # pickletools on bytes that are no pickle
        raise pickle.UnpicklingError(f'unreadable pickle opcodes ({err})') from None
    stand_ins = [type(name.rsplit('.', 1)[-1], (InertStandIn,), {'pickled_name': name})
                 for name in sorted(names)
                 if name.split('.', 1)[0] not in BUILTIN_MODULES and name not in allowed]
    with torch.serialization.safe_globals([(c, c.pickled_name) for c in stand_ins]):
        root = torch.load(path, map_location=map_location, weights_only=True)
    return root, [c.pickled_name for c in stand_ins if c.used]


def allowed_names() -> set[str]:
    """'module.name' of the globals allowed already (`torch.serialization.get_safe_globals`),
    which a stand-in must not shadow."""
    names = set()
    for entry in torch.serialization.get_safe_globals():
        if isinstance(entry, tuple):
            names.add(entry[1])
        else:
            names.add(f'{entry.__module__}.{entry.__qualname__}')
    return names


def pickled_globals(path: str) -> set[str]:
    """'module.name' of every global the file's pickles name, read from their opcodes
    (`pickletools`, which runs nothing): GLOBAL's argument, and for STACK_GLOBAL the two
    strings pushed before it."""
    if is_torch_zip(path):
        with zipfile.ZipFile(path) as zf:
            data = torch_pickle_member(zf)  # the entry torch reads
            if data is None:
                raise pickle.UnpicklingError('a zip archive without data.pkl, not a torch file')
            with zf.open(data) as f:  # streamed: never the whole entry in memory
                return _globals_in(f, count=1)
    with open(path, 'rb') as f:
        return _globals_in(f, count=LEGACY_PICKLES)


def _globals_in(f, count: int) -> set[str]:
    names: set[str] = set()
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
