"""How much one checkpoint read may allocate, and how deep what it holds may nest.

torch's weights-only unpickler runs nothing but a few allow-listed constructors, yet those
can be asked for any size: `bytearray(1_500_000_000)` takes 350 bytes of pickle, a
`torch.FloatTensor(n)` or a storage of `n` elements as many bytes as `n` says, and a zip
archive's compressed entries unpack to far more than the file's size. Before torch reads a
file, `check_read_budget` adds up, without running anything, what the read would allocate:

- the unpacked size of every zip entry (what torch's reader decompresses);
- from the pickle opcodes (`pickletools`, which runs nothing, played on a model of the
  unpickler's stack): every storage the file declares (elements x element size, once per
  storage) and every allow-listed constructor called with a size (`bytearray`, tensor and
  storage classes, numpy's array reconstructor, quantized tensors);

and refuses the file, in one line naming it, when either is above the budget: twice the
file's size plus `PECO_MM_READ_BUDGET_MB` (256 MiB by default). A real checkpoint
allocates about its own size. After the read, `check_nesting` refuses data nested deeper
than `MAX_NESTING` levels (walked once per shared object, never recursively), which every
later recursive walk (repr, copy, comparison) would fail on.
"""
from __future__ import annotations

import contextlib
import math
import os
import pickletools
import warnings
import zipfile

BUDGET_ENV = 'PECO_MM_READ_BUDGET_MB'
DEFAULT_BUDGET_MB = 256
MAX_NESTING = 100
LEGACY_PICKLES = 4  # a legacy torch file: magic number, protocol, system info, the object


class Global(str):
    """A global the pickle names (its 'module.name'), as the model of the stack holds it."""


def read_limit(path: str) -> int:
    """The most bytes a read of `path` may allocate: twice its size plus the budget."""
    mb = float(os.environ.get(BUDGET_ENV, DEFAULT_BUDGET_MB))
    return 2 * os.path.getsize(path) + int(mb * 2**20)


def check_read_budget(path: str) -> None:
    """Raise ValueError (one line naming `path`) when reading it would allocate more than
    `read_limit`: its zip entries unpacked, or the storages and sized constructors of its
    pickles."""
    limit = read_limit(path)
    over = f'more than a read may allocate ({limit} bytes: twice the file size plus ' \
           f'{BUDGET_ENV}={os.environ.get(BUDGET_ENV, DEFAULT_BUDGET_MB)}); not read'
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            unpacked = sum(info.file_size for info in zf.infolist())
            if unpacked > limit:
                raise ValueError(f'{path}: its zip entries unpack to {unpacked} bytes, {over}')
            pickles = [n for n in zf.namelist() if n.endswith('/data.pkl') or n == 'data.pkl']
            if not pickles:
                return
            with zf.open(pickles[0]) as f:
                size, what = pickle_allocations(f, 1)
    else:
        with open(path, 'rb') as f:
            size, what = pickle_allocations(f, LEGACY_PICKLES)
    if size > limit:
        raise ValueError(f'{path}: reading it would allocate {size} bytes ({what}), {over}')


def pickle_allocations(f, count: int) -> tuple[int, str]:
    """(bytes the next `count` pickles of `f` would allocate, the largest item named), read
    from their opcodes on a model of the weights-only unpickler's stack (nothing is run).
    Unreadable opcodes end the count: the unpickler refuses them itself."""
    model = StackModel()
    with contextlib.suppress(ValueError, IndexError, KeyError, EOFError, TypeError):
        for _ in range(count):
            for op, arg, _pos in pickletools.genops(f):
                model.step(op.name, arg)
    return model.total, model.largest


class StackModel:
    """The weights-only unpickler's stack, holding only what sizes an allocation: ints,
    tuples, and the globals named; everything else is None."""

    def __init__(self) -> None:
        self.stack: list = []
        self.marks: list[list] = []
        self.memo: dict = {}
        self.storages: set = set()
        self.total, self.largest, self.top = 0, 'nothing', 0

    def step(self, name: str, arg) -> None:
        """Play one opcode (the ops the weights-only unpickler reads; it refuses others)."""
        stack = self.stack
        if name == 'GLOBAL':
            stack.append(global_name(arg))
        elif name in ('BININT', 'BININT1', 'BININT2', 'LONG1'):
            stack.append(arg)
        elif name in ('BINPUT', 'LONG_BINPUT'):
            self.memo[arg] = stack[-1]
        elif name in ('BINGET', 'LONG_BINGET'):
            stack.append(self.memo[arg])
        elif name == 'MARK':
            self.marks.append(stack)
            self.stack = []
        elif name == 'TUPLE':
            items, self.stack = self.stack, self.marks.pop()
            self.stack.append(tuple(items))
        elif name in ('TUPLE1', 'TUPLE2', 'TUPLE3'):
            n = int(name[-1])
            stack[-n:] = [tuple(stack[-n:])]
        elif name in ('APPENDS', 'SETITEMS'):
            self.stack = self.marks.pop()
        elif name in ('APPEND', 'BUILD'):
            stack.pop()
        elif name == 'SETITEM':
            del stack[-2:]
        elif name == 'REDUCE':
            args = stack.pop()
            stack[-1] = self.call(stack[-1], args)
        elif name == 'NEWOBJ':
            args = stack.pop()
            stack[-1] = self.call(stack[-1], args, result=False)
        elif name == 'BINPERSID':
            stack[-1] = self.storage(stack[-1])
        elif name == 'EMPTY_TUPLE':
            stack.append(())
        elif name not in ('PROTO', 'STOP'):
            stack.append(None)  # strings, floats, None, booleans, empty containers

    def call(self, func, args, result: bool = True):
        """What calling `func(*args)` pushes; its allocation counted."""
        if not isinstance(func, Global) or not isinstance(args, tuple):
            return None
        self.add(constructor_bytes(func, args), f'{func}(...)')
        return args[0] if result and func == 'torch.Size' and args else None

    def storage(self, pid):
        """A storage the file declares: ('storage', type, key, location, elements, ...)."""
        if (isinstance(pid, tuple) and len(pid) >= 5 and isinstance(pid[4], int)
                and pid[2] not in self.storages):
            self.storages.add(pid[2])
            self.add(pid[4] * element_size(pid[1]), f'a storage of {pid[4]} elements')
        return None

    def add(self, size: int, what: str) -> None:
        self.total += size
        if size > self.top:
            self.top, self.largest = size, what


def global_name(arg: str) -> Global:
    """GLOBAL's 'module name' as the unpickler resolves it ('__builtin__ bytearray', as
    protocol 2 writes it, is 'builtins.bytearray')."""
    from _compat_pickle import IMPORT_MAPPING, NAME_MAPPING
    module, _, name = arg.partition(' ')
    module, name = NAME_MAPPING.get((module, name), (IMPORT_MAPPING.get(module, module), name))
    return Global(f'{module}.{name}')


def constructor_bytes(name: str, args: tuple) -> int:
    """The bytes an allow-listed constructor allocates for `args` (0 for the others)."""
    if name == 'builtins.bytearray':
        return args[0] if args and isinstance(args[0], int) else 0
    if name.endswith('._rebuild_qtensor'):
        return 8 * _product(args[2:3])
    if name.endswith('._reconstruct'):  # numpy's ndarray reconstructor: (type, shape, dtype)
        return 8 * _product(args[1:2])
    if name.startswith('torch.') and name.endswith(('Tensor', 'Storage')):
        return 8 * _product(args)
    return 0


def _product(values) -> int:
    """The product of the ints in `values` and in its tuples (sizes); 0 when there are
    none."""
    ints = []
    for v in values:
        if isinstance(v, int) and not isinstance(v, bool):
            ints.append(v)
        elif isinstance(v, tuple):
            ints += [i for i in v if isinstance(i, int) and not isinstance(i, bool)]
    return math.prod(max(i, 0) for i in ints) if ints else 0


def element_size(storage_type) -> int:
    """Bytes per element of a storage class the pickle names ('torch.HalfStorage' -> 2;
    untyped storages count bytes; 8 for a name not known)."""
    import torch
    short = str(storage_type).rsplit('.', 1)[-1]
    if short == 'UntypedStorage':
        return 1
    with warnings.catch_warnings():  # TypedStorage's deprecation note
        warnings.simplefilter('ignore')
        dtype = getattr(getattr(torch, short, None), 'dtype', None)
    return dtype.itemsize if isinstance(dtype, torch.dtype) else 8


def check_nesting(obj, path: str, limit: int = MAX_NESTING) -> None:
    """Raise ValueError (one line naming `path`) when `obj` nests containers deeper than
    `limit` levels. Each object is walked once (shared ones too), with a stack of its own,
    so neither a deep nor a widely shared structure costs more than its size."""
    depth: dict[int, int] = {}
    todo = [(obj, False)]
    open_ids: set[int] = set()
    while todo:
        node, children_done = todo.pop()
        key = id(node)
        if children_done:
            open_ids.discard(key)
            depth[key] = 1 + max((depth.get(id(c), 0) for c in _children(node)), default=0)
            if depth[key] > limit:
                raise ValueError(f'{path}: holds data nested deeper than {limit} levels; not '
                                 'a checkpoint peco_mm reads')
        elif key not in depth and key not in open_ids and _children(node) is not None:
            open_ids.add(key)
            todo.append((node, True))
            todo += [(c, False) for c in _children(node)]


def _children(node) -> list | None:
    """The objects a container holds (None: not a container)."""
    if isinstance(node, dict):
        return [*node.keys(), *node.values()]
    if isinstance(node, (list, tuple, set, frozenset)):
        return list(node)
    if hasattr(node, 'pickled_name'):  # an inert stand-in: its arguments and state
        return [getattr(node, 'args', ()), getattr(node, 'state', {})]
    return None
