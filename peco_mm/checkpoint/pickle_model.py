"""What a checkpoint's pickle would build, read off its opcodes without running anything.

torch's weights-only unpickler reads a closed set of opcodes and calls a closed set of
allow-listed constructors. `PickleModel` plays the same opcodes (`pickletools.genops`, which
runs nothing) on a model of that unpickler's stack, which holds only what sizes a read:

- every allocation: a storage the file declares (elements x element size, once per storage)
  and each allow-listed constructor called with a size (`RULES`: bytearray, the legacy tensor
  and storage classes, quantized tensors, device copies, numpy's `ndarray`, `_reconstruct`,
  an array's state and its scalars, `_codecs.encode`). A size it cannot resolve to a plain
  number (a numpy integer, a call's result, a list) is unbounded.
- what the object graph expands to: each value's tree size (a container shared through the
  pickle memo counts once per reference), and whether a value holds a memo-shared tuple.

It refuses (`Refusal`) what no checkpoint needs and a reader cannot afford: a memo-shared
tuple used as a dict key or set item (hashing walks every copy: 40 levels of a tuple held
twice are 2^40 tuples to hash), a graph whose shared references add more than
`MAX_SHARED_EXPANSION` objects beyond those the file writes, an object changed after it was
shared (a cycle, or a pickle written by hand), numpy arrays of Python objects.
"""
from __future__ import annotations

import pickle
import struct
from _compat_pickle import IMPORT_MAPPING, NAME_MAPPING

from .allocations import (DATA_KINDS, KEEP_CHARS, Global, Node, Refusal, Text, elements, is_shared,
                          number, product, rule_for, size_of, array_bytes, dtype_state,
                          element_size)

# opcode byte -> name, for the opcodes torch's weights-only unpickler reads
OPCODES = {op[0]: name for name, op in vars(pickle).items() if name in (
    'GLOBAL', 'NEWOBJ', 'REDUCE', 'BUILD', 'APPEND', 'APPENDS', 'SETITEM', 'SETITEMS', 'MARK',
    'TUPLE', 'TUPLE1', 'TUPLE2', 'TUPLE3', 'NONE', 'NEWFALSE', 'NEWTRUE', 'EMPTY_TUPLE',
    'EMPTY_LIST', 'EMPTY_DICT', 'EMPTY_SET', 'BININT', 'BININT1', 'BININT2', 'BINFLOAT',
    'BINUNICODE', 'SHORT_BINSTRING', 'BINPERSID', 'BINGET', 'LONG_BINGET', 'BINPUT',
    'LONG_BINPUT', 'LONG1', 'PROTO', 'STOP')}
# the struct format of each fixed-size argument
FIXED = {'BININT': '<i', 'BININT1': '<B', 'BININT2': '<H', 'BINFLOAT': '>d', 'BINGET': '<B',
         'LONG_BINGET': '<I', 'BINPUT': '<B', 'LONG_BINPUT': '<I', 'PROTO': '<B'}
# shared references may add at most this many objects (plus as many as the file writes) to
# the graph walked without remembering what was seen (hashing, printing, copying)
MAX_SHARED_EXPANSION = 1 << 20
# the opcodes torch's weights-only unpickler reads (it refuses the others where they stand)
PUSH_ARG = {'BININT', 'BININT1', 'BININT2', 'LONG1', 'BINFLOAT', 'BINUNICODE',
            'SHORT_BINSTRING'}
PUSH_CONST = {'NONE': None, 'NEWTRUE': True, 'NEWFALSE': False}
EMPTY = {'EMPTY_TUPLE': 'tuple', 'EMPTY_LIST': 'list', 'EMPTY_DICT': 'dict',
         'EMPTY_SET': 'set'}
# constructors that hash what they are given (keys, set items)
HASHING = ('builtins.set', 'collections.Counter', 'collections.OrderedDict',
           'collections.defaultdict')
# constructors that iterate what they are given: a tensor or array becomes one Python object
# per element (`ITEM_BYTES` each, at most)
ITERATING = (*HASHING, 'builtins.bytearray', 'torch.Size')
ITEM_BYTES = 64


class PickleModel:
    """Plays pickles' opcodes; `total` bytes allocated (`largest`: the biggest item named),
    `unresolved`: the first allocation whose size is no plain number (None: every size
    was one)."""

    def __init__(self) -> None:
        self.total, self.top, self.largest = 0, 0, 'nothing'
        self.unresolved: str | None = None
        self.storages: set = set()
        self.written = self.extra = 0
        self.stack: list = []
        self.marks: list[list] = []
        self.memo: dict = {}

    def walk(self, f, count: int) -> None:
        """Play the next `count` pickles of the open file `f`. Bytes that are no pickle, an
        opcode the weights-only unpickler refuses, an empty stack or memo end the walk where
        they stand: the unpickler stops there too."""
        for _ in range(count):
            self.stack, self.marks, self.memo = [], [], {}
            try:
                for name, arg in opcodes(f):
                    if not self.step(name, arg):
                        return
            except (ValueError, EOFError, IndexError, KeyError, struct.error):
                return

    def step(self, name: str, arg) -> bool:
        """Play one opcode; False where the unpickler would stop."""
        stack = self.stack
        if name in PUSH_ARG:
            self.push(arg)
        elif name == 'GLOBAL':
            self.push(global_name(*arg))
        elif name in ('BINPUT', 'LONG_BINPUT'):
            self.memo[arg] = stack[-1]
        elif name in ('BINGET', 'LONG_BINGET'):
            self.fetch(self.memo[arg])
        elif name in PUSH_CONST:
            self.push(PUSH_CONST[name])
        elif name in EMPTY:
            self.push(Node(EMPTY[name]))
        elif name == 'MARK':
            self.marks.append(stack)
            self.stack = []
        elif name == 'TUPLE':
            items = self.pop_mark()
            self.push(Node('tuple', tuple(items)))
        elif name in ('TUPLE1', 'TUPLE2', 'TUPLE3'):
            n = int(name[-1])
            if len(stack) < n:
                return False
            items = tuple(stack[-n:])
            del stack[-n:]
            self.push(Node('tuple', items))
        elif name in ('APPEND', 'APPENDS', 'SETITEM', 'SETITEMS'):
            return self.add_items(name)
        elif name == 'BUILD':
            state = stack.pop()
            return self.build(stack[-1], state)
        elif name == 'REDUCE':
            args = stack.pop()
            stack[-1] = self.call(stack[-1], args)
        elif name == 'NEWOBJ':
            args = stack.pop()
            stack[-1] = self.call(stack[-1], args)
        elif name == 'BINPERSID':
            stack[-1] = self.storage(stack[-1])
        else:
            return name in ('PROTO', 'STOP')
        return True

    def push(self, value) -> None:
        self.written += 1
        self.stack.append(value)

    def pop_mark(self) -> list:
        items, self.stack = self.stack, self.marks.pop()
        return items

    def fetch(self, value) -> None:
        """BINGET: the same object again. A container shared so is frozen, and counts once
        more, with everything it holds, in the expanded graph."""
        if type(value) is Node:
            value.frozen = True
            value.shared = value.shared or value.kind == 'tuple'
            self.extra += value.size - 1
            if self.extra > MAX_SHARED_EXPANSION + self.written:
                raise Refusal(
                    f'holds objects shared so often that a walk of it meets more than '
                    f'{self.written + self.extra} (the file writes {self.written}; shared '
                    f'references may add at most {MAX_SHARED_EXPANSION} more)')
        self.push(value)

    def add_items(self, name: str) -> bool:
        """APPEND(S) / SETITEM(S) into the container under them; dict keys are checked."""
        items = self.pop_mark() if name.endswith('S') else [self.stack.pop()]
        if name == 'SETITEM':
            items.insert(0, self.stack.pop())
        target = self.stack[-1]
        if type(target) is not Node:
            return False  # the unpickler appends to lists and sets items of dicts only
        if name.startswith('SET'):
            check_keys(items[0::2])
        self.change(target, items)
        return True

    def change(self, target: Node, items) -> None:
        if target.frozen:
            raise Refusal('changes a list, dict or object after sharing it through the pickle '
                          'memo (a cycle, or a pickle written by hand); a checkpoint is a tree '
                          'of plain data and tensors')
        target.size += sum(size_of(i) for i in items)
        target.shared = target.shared or any(is_shared(i) for i in items)

    def build(self, inst, state) -> bool:
        """BUILD: `state` set on `inst`; an array's state allocates, a dtype's sizes it."""
        if type(inst) is not Node:
            return False
        self.change(inst, [state])
        fields = state.items if type(state) is Node and state.kind == 'tuple' else None
        if inst.kind == 'ndarray':  # (version, shape, dtype, is_fortran, data)
            shape, dtype = (fields[-4], fields[-3]) if fields and len(fields) >= 4 else (0, 0)
            self.allocate(array_bytes(shape, dtype), 'a numpy array state')
            inst.value = elements(shape)
        elif inst.kind == 'dtype':
            inst.value = dtype_state(inst.value, fields)
        return True

    def call(self, func, args) -> Node:
        """What calling `func(*args)` pushes (REDUCE, NEWOBJ); its allocation counted."""
        argv = args.items if type(args) is Node and args.kind == 'tuple' else None
        name = func if isinstance(func, Global) else ''
        if name in HASHING or name.endswith('.ConfigDict'):
            check_keys([a for a in argv or [args] if not (type(a) is Node and a.kind == 'dict')])
        if name.endswith('._rebuild_from_type_v2') and argv and len(argv) >= 3:
            result = self.call(argv[0], argv[2])  # (func, new_type, args, state): func(*args)
            if type(result) is Node:
                result.size += sum(size_of(a) for a in argv[3:])
            return result
        rule = rule_for(name)
        cost, result = rule(name, argv) if rule else (0, None)
        self.allocate(cost, f'{name}(...)')
        if name in ITERATING or name.endswith(('.ConfigDict', '.HistoryBuffer')):
            for arg in argv or [args]:
                if type(arg) is Node and arg.kind in DATA_KINDS:
                    count = arg.value if isinstance(arg.value, int) else None
                    self.allocate(None if count is None else ITEM_BYTES * count,
                                  f'{name}(...) iterating a tensor or array')
        if type(result) is not Node:
            return result if result is not None else Node('object', size=1 + size_of(args))
        result.size += size_of(args)
        return result

    def storage(self, pid) -> Node:
        """A storage the file declares: ('storage', type, key, location, elements, ...)."""
        items = pid.items if type(pid) is Node and pid.kind == 'tuple' else ()
        if len(items) >= 5 and items[2] not in self.storages:
            key = items[2] if isinstance(items[2], (str, int)) else object()
            self.storages.add(key)
            self.allocate(product([items[4]], element_size(items[1])),
                          f'a storage of {items[4]} elements')
        count = number(items[4]) if len(items) >= 5 else None
        return Node('storage', value=count, size=1 + size_of(pid))

    def allocate(self, size: int | None, what: str) -> None:
        if size is None:
            self.unresolved = self.unresolved or what
            return
        self.total += size
        if size > self.top:
            self.top, self.largest = size, what


def check_keys(keys) -> None:
    """Refuse a memo-shared tuple as a dict key or set item: hashing walks every copy."""
    if any(is_shared(k) for k in keys):
        raise Refusal('uses a tuple it shares through the pickle memo as a dict key or set '
                      'item (hashing it walks every copy: 40 nested levels are 2^40 tuples); '
                      'a checkpoint keys its dicts with plain values')


def global_name(module: str, name: str) -> Global:
    """GLOBAL's module and name as the unpickler resolves them ('__builtin__ bytearray', as
    protocol 2 writes it, is 'builtins.bytearray')."""
    if (module, name) in NAME_MAPPING:
        module, name = NAME_MAPPING[(module, name)]
    return Global(f'{IMPORT_MAPPING.get(module, module)}.{name}')


# ---- the opcodes, read byte for byte as torch's weights-only unpickler reads them ----------
def opcodes(f):
    """(name, argument) of each opcode of the next pickle of `f`, up to STOP. ValueError at
    an opcode torch does not read, EOFError (or struct.error) where the bytes end: torch
    stops there too. Strings longer than `KEEP_CHARS` bytes are skipped, not kept: `Text`."""
    read, readline = f.read, f.readline
    while True:
        key = read(1)
        if not key:
            raise EOFError('the pickle ends before STOP')
        name, arg = OPCODES.get(key[0], ''), None
        if not name:
            raise ValueError(f'opcode {key!r}, which the weights-only unpickler refuses')
        if name == 'GLOBAL':
            arg = (readline()[:-1].decode('utf-8'), readline()[:-1].decode('utf-8'))
        elif name in FIXED:
            arg = struct.unpack(FIXED[name], read(struct.calcsize(FIXED[name])))[0]
        elif name in ('BINUNICODE', 'SHORT_BINSTRING', 'LONG1'):
            size = struct.unpack('<I', read(4))[0] if name == 'BINUNICODE' else read(1)[0]
            arg = text(f, size, decode=name == 'BINUNICODE')
            if name == 'LONG1':
                arg = int.from_bytes(arg, 'little', signed=True)
        yield name, arg
        if name == 'STOP':
            return


def text(f, size: int, decode: bool):
    """The next `size` bytes of `f` (as str when `decode`), or `Text(size)` when longer than
    `KEEP_CHARS`, read in pieces: a long string is never held."""
    if size <= KEEP_CHARS:
        data = f.read(size)
        if len(data) < size:
            raise EOFError('a string cut short')
        return str(data, 'utf-8', 'surrogatepass') if decode else data
    left = size
    while left:
        piece = f.read(min(left, 1 << 20))
        if not piece:
            raise EOFError('a string cut short')
        left -= len(piece)
    return Text(size)
