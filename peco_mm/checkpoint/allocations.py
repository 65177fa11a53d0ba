"""What each constructor torch's weights-only unpickler may call allocates, read off its
arguments as `pickle_model` models them, and the values that model holds.

`RULES` maps every allow-listed callable (torch's own list, and the numpy and mmengine types
`read_checkpoint` adds for its reads) to a rule: (bytes it allocates, what it pushes). A
size that is not a plain number gives None: the read is refused, whatever the rest adds up
to. Calls that iterate a tensor or an array count one Python object per element.
"""
from __future__ import annotations

import functools
import math
import re
import warnings

KEEP_CHARS = 64  # longer strings are kept as their length only
# codecs whose output length is known: bytes per character
CODEC_BYTES = {'latin1': 1, 'latin-1': 1, 'iso-8859-1': 1, 'ascii': 1, 'utf8': 4,
               'utf-8': 4, 'utf_8': 4}
CONTAINER_KINDS = ('tuple', 'list', 'dict', 'set')
DATA_KINDS = ('tensor', 'storage', 'ndarray')  # what holds elements, not Python objects
OBJECT_DTYPE = ('holds a numpy array of Python objects (dtype object), which numpy may '
                'allocate before it checks them; a checkpoint holds arrays of numbers only')


class Refusal(Exception):
    """What makes a file unreadable to the model (the message does not name the file)."""


class Global(str):
    """A global the pickle names ('module.name'), as the model's stack holds it."""


class Text:
    """A string or bytes value longer than `KEEP_CHARS`: its length only."""
    __slots__ = ('length',)

    def __init__(self, length: int) -> None:
        self.length = length


class Node:
    """A container or object the unpickler builds: its tree size (what a walk that does not
    remember shared objects visits), whether it holds a tuple shared through the memo,
    whether it was shared already (then it must not change), and what sizes an allocation:
    a tuple's items, or a call's result (`kind`, `value`: elements, bytes per item)."""
    __slots__ = ('kind', 'items', 'value', 'size', 'shared', 'frozen')

    def __init__(self, kind: str, items: tuple = (), value=None, size: int = 1) -> None:
        self.kind, self.items, self.value = kind, items, value
        self.size = size + sum(size_of(i) for i in items)
        self.shared = any(is_shared(i) for i in items)
        self.frozen = False


def size_of(value) -> int:
    return value.size if type(value) is Node else 1


def is_shared(value) -> bool:
    return type(value) is Node and value.shared


# ---- numbers: what a size, a shape, a dtype resolve to (None: not a plain number) -----------
def number(value) -> int | None:
    if isinstance(value, int):  # (bool too: bytearray(True) is one byte)
        return max(int(value), 0)
    if isinstance(value, float) and math.isfinite(value):
        return max(math.ceil(value), 0)
    return None


def elements(shape) -> int | None:
    """Elements of a shape: a number, or a tuple / torch.Size of numbers."""
    if type(shape) is Node and shape.kind == 'size':
        shape = shape.value
    if type(shape) is Node and shape.kind == 'tuple':
        return product(shape.items)
    return number(shape)


def product(values, scale: int = 1) -> int | None:
    numbers = [number(v) for v in values]
    return None if None in numbers else math.prod(numbers) * scale


def length(value) -> int | None:
    """Characters of a string or bytes value."""
    if isinstance(value, (str, bytes)):
        return len(value)
    return value.length if isinstance(value, Text) else None


def dtype_size(value) -> int | None:
    """Bytes per item of a numpy dtype as a pickle gives it: a dtype it built, a type code
    ('f8', b'b'), a dtype class, None (float64). Refuses an object dtype."""
    if type(value) is Node and value.kind == 'dtype':
        return value.value
    if value is None:
        return 8
    if isinstance(value, Global):
        module, _, short = value.rpartition('.')
        return numpy_dtype(short, from_class=True) if module == 'numpy.dtypes' else None
    if isinstance(value, (str, bytes)):
        code = value.decode('latin-1') if isinstance(value, bytes) else value
        if re.fullmatch(r'[<>|=]?(\?|[A-Za-z][A-Za-z0-9]{0,15})', code):
            return numpy_dtype(code)
    return None


def numpy_dtype(code: str, from_class: bool = False) -> int | None:
    """Itemsize of the numpy dtype `code` names (a type code, or a class of numpy.dtypes),
    None when numpy knows no such name; an object dtype is refused."""
    import numpy as np
    cls = getattr(np.dtypes, code, None) if from_class else None
    if from_class and not (isinstance(cls, type) and issubclass(cls, np.dtype)):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        try:  # (np.dtype of a dtype class is the object dtype: the class is called)
            dtype = cls() if from_class else np.dtype(code)
        except (TypeError, ValueError):
            return None
    if dtype.hasobject:
        raise Refusal(OBJECT_DTYPE)
    return None if dtype.fields or dtype.subdtype else dtype.itemsize


def dtype_state(itemsize: int | None, fields) -> int | None:
    """A dtype's itemsize after its state (version, byte order, subarray, names, fields,
    elsize, alignment, flags, ...): unknown for a record or subarray dtype."""
    if not fields or len(fields) < 8 or itemsize is None:
        return None
    flags = number(fields[7])
    if flags is not None and flags & 1:  # NPY_ITEM_REFCOUNT: it holds Python objects
        raise Refusal(OBJECT_DTYPE)
    if flags is None or any(f is not None for f in fields[2:5]):
        return None
    elsize = fields[5]
    if isinstance(elsize, int) and elsize > itemsize:
        return elsize
    return itemsize if isinstance(elsize, int) else None


def array_bytes(shape, dtype) -> int | None:
    itemsize, count = dtype_size(dtype), elements(shape)
    return None if itemsize is None or count is None else itemsize * count


def element_size(storage_type) -> int:
    return _element_size(str(storage_type))


@functools.lru_cache(maxsize=256)
def _element_size(storage_type: str) -> int:
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


# ---- the allow-listed constructors: (bytes allocated or None, what the call pushes) ---------
def bytes_rule(name: str, argv):
    """bytearray(n | str, encoding | iterable); _codecs.encode(str, encoding)."""
    if argv is None:
        return None, None
    if not argv:
        return 0, None
    first = argv[0]
    encode = name.endswith('.encode')
    if number(first) is not None and not encode:
        return number(first), None
    if type(first) is Node and not encode:
        if first.kind in DATA_KINDS:
            return 0, None  # iterated: one object an element, counted by the model
        return (first.size if first.kind in CONTAINER_KINDS else None), None  # byte values
    codec = argv[1] if len(argv) > 1 else ('utf-8' if encode else None)
    per_char = 1 if codec is None else CODEC_BYTES.get(str(codec).lower())
    chars = length(first)
    if per_char is None or chars is None:
        return None, None
    keep = encode and isinstance(first, str) and per_char == 1 and chars <= KEEP_CHARS
    return chars * per_char, (first if keep else Text(chars * per_char))


def tensor_rule(name: str, argv):
    """torch.FloatTensor(*sizes | sequence), a storage class(n | sequence)."""
    short = name.rsplit('.', 1)[-1]
    itemsize = element_size(name) if short.endswith('Storage') else (
        16 if 'Complex' in short else 8)
    if argv is None:
        return None, None
    if not argv:
        return 0, Node('tensor', value=0)
    first = argv[0] if len(argv) == 1 else None
    if type(first) is Node and first.kind in ('storage', 'tensor'):
        return 0, Node('tensor', value=first.value)  # a view of what is counted already
    if type(first) is Node and first.kind == 'ndarray':
        count = first.value if isinstance(first.value, int) else None
        return None if count is None else count * itemsize, Node('tensor', value=count)
    if type(first) is Node and first.kind in ('list', 'tuple') and elements(first) is None:
        return first.size * itemsize, Node('tensor', value=first.size)  # nested values
    count = elements(first) if first is not None else product(argv)
    return None if count is None else count * itemsize, Node('tensor', value=count)


def view_rule(name: str, argv):
    """Tensor rebuilds that view a counted storage, containers, scalars: nothing more than
    their arguments; a tensor's elements are kept for a device copy."""
    if name.endswith(('_rebuild_tensor', '_rebuild_tensor_v2', '_rebuild_tensor_v3')):
        return 0, Node('tensor', value=elements(argv[2]) if argv and len(argv) > 2 else None)
    if name.endswith(('_rebuild_parameter', '_rebuild_parameter_with_state', 'Parameter')):
        data = argv[0] if argv else None
        return 0, Node('tensor', value=data.value if type(data) is Node else None)
    if name == 'torch.Size' and argv and type(argv[0]) is Node and argv[0].kind == 'tuple':
        return 0, Node('size', value=argv[0])
    return 0, None


def qtensor_rule(name: str, argv):
    """_rebuild_qtensor(storage, offset, size, ...): a quantized tensor of `size`."""
    count = elements(argv[2]) if argv and len(argv) > 2 else None
    return None if count is None else 8 * count, Node('tensor', value=count)


def device_copy_rule(name: str, argv):
    """_rebuild_device_tensor_from_numpy / _from_cpu_tensor(data, dtype, ...): a copy of
    `data` in another dtype (at most 16 bytes an element)."""
    data = argv[0] if argv else None
    count = data.value if type(data) is Node and data.kind in ('ndarray', 'tensor') else None
    return (None if not isinstance(count, int) else 16 * count), Node('tensor', value=count)


def array_rule(name: str, argv):
    """numpy's ndarray(shape, dtype=float64, ...), _reconstruct(type, shape, dtype)."""
    if argv is None or len(argv) < (3 if name.endswith('_reconstruct') else 1):
        return None, None
    shape, dtype = (argv[1], argv[2]) if name.endswith('_reconstruct') else (
        argv[0], argv[1] if len(argv) > 1 else None)
    return array_bytes(shape, dtype), Node('ndarray', value=elements(shape))


def scalar_rule(name: str, argv):
    """numpy's scalar(dtype, data): one item of `dtype`."""
    return (dtype_size(argv[0]) if argv else None), Node('scalar')


def dtype_rule(name: str, argv):
    """numpy.dtype(code, align, copy), a dtype class(): a dtype, sized from its code."""
    if name.startswith('numpy.dtypes.'):
        itemsize = numpy_dtype(name.rsplit('.', 1)[-1], from_class=True)
    else:
        itemsize = dtype_size(argv[0]) if argv else None
    return 0, Node('dtype', value=itemsize)


RULES = [  # 'module.name' of an allow-listed callable -> its rule (first match)
    (r'builtins\.bytearray|_codecs\.encode', bytes_rule),
    (r'torch\.(cuda\.)?(sparse\.)?\w*Tensor|torch\.(cuda\.)?\w*Storage|'
     r'torch\.storage\.(Typed|Untyped)Storage', tensor_rule),
    (r'torch\._utils\._rebuild_qtensor', qtensor_rule),
    (r'torch\._utils\._rebuild_device_tensor_from_(numpy|cpu_tensor)', device_copy_rule),
    (r'numpy\.ndarray|numpy\.(_core|core)\.multiarray\._reconstruct', array_rule),
    (r'numpy\.(_core|core)\.multiarray\.scalar', scalar_rule),
    (r'numpy\.dtype|numpy\.dtypes\.\w+DType', dtype_rule),
    (r'torch\._utils\._rebuild_\w+|torch\._tensor\._rebuild_from_type_v2|torch\.Size|'
     r'torch\.device|torch\.nn\.parameter\.Parameter|torch\.serialization\._get_layout|'
     r'builtins\.(set|complex)|collections\.(OrderedDict|Counter|defaultdict)|'
     r'mmengine\.[\w.]+\.(ConfigDict|HistoryBuffer)', view_rule),
]


@functools.lru_cache(maxsize=1024)
def rule_for(name: str):
    """The rule that sizes a call of `name` (None: no allow-listed constructor; such a call
    is counted as its arguments only)."""
    return next((rule for pattern, rule in RULES if re.fullmatch(pattern, name)), None)
