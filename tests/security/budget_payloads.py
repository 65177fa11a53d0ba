"""Files of a few kilobytes that talk their way past a read budget, and what each must be
refused with: a size carried as a numpy integer, numpy's own array constructors, a zip
archive that names its pickle twice or a legacy file with a zip archive after it (the entry
checked is not the one torch reads), numpy arrays of Python objects, a dict key built of one
tuple shared over and over, an object graph that shared references blow up.

Each asks for 8 MiB against the tests' budget of 1 MiB (`hostile.BUDGET_MB`) or is refused
for its structure; a real attack asks for gigabytes, or 2^40 steps (`dag_key_file`).
"""
import collections
import io
import pickle
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import torch

try:  # numpy >= 2 moved the reconstructor
    from numpy._core.multiarray import _reconstruct
except ImportError:  # pragma: no cover
    from numpy.core.multiarray import _reconstruct

SIZE = 8 << 20  # bytes each allocation payload asks for
ALLOC = r'would allocate 838\d{4} bytes \(WHAT\), more than a read may allocate'
NOT_A_NUMBER = (r'what WHAT allocates cannot be read off the file as a plain number .*a '
                r'checkpoint gives sizes as plain integers; not read')
OBJECTS = (r'holds a numpy array of Python objects \(dtype object\).*a checkpoint holds '
           r'arrays of numbers only; not read')
SHARED_KEY = (r'uses a tuple it shares through the pickle memo as a dict key.*a checkpoint '
              r'keys its dicts with plain values; not read')
EXPANDS = (r'holds objects shared so often that a walk of it meets more than \d+ \(the file '
           r'writes \d+; shared references may add at most 1048576 more\); not read')
# file name -> the refusal its one-line error must contain (a regular expression)
BUDGET_EXPECTED = {
    'size_numpy_int': NOT_A_NUMBER.replace('WHAT', r'builtins\.bytearray\(\.\.\.\)'),
    'size_numpy_int_legacy': NOT_A_NUMBER.replace('WHAT', r'builtins\.bytearray\(\.\.\.\)'),
    'alloc_ndarray': ALLOC.replace('WHAT', r'numpy\.ndarray\(\.\.\.\)'),
    'alloc_ndarray_legacy': ALLOC.replace('WHAT', r'numpy\.ndarray\(\.\.\.\)'),
    'alloc_reconstruct': ALLOC.replace(
        'WHAT', r'numpy\.(_core|core)\.multiarray\._reconstruct\(\.\.\.\)'),
    'object_array': OBJECTS,
    'object_array_legacy': OBJECTS,
    'zip_pickle_twice': (r"its zip archive holds 2 entries named '\w+/data\.pkl' .*each entry "
                         r'name must appear once; not read'),
    'legacy_then_zip': ALLOC.replace('WHAT', r'builtins\.bytearray\(\.\.\.\)'),
    'shared_key': SHARED_KEY,
    'shared_key_legacy': SHARED_KEY,
    'shared_expansion': EXPANDS,
    'shared_expansion_legacy': EXPANDS,
}
WEIGHTS = {'state_dict': {'w': torch.ones(4)}}


class Call:
    """Pickled as a call of `func(*args)` (then `state` set on the result, when given)."""

    def __init__(self, func, *args, state=None) -> None:
        self.reduced = (func, args) if state is None else (func, args, state)

    def __reduce__(self):
        return self.reduced


class KeyedDict:
    """Pickled as an OrderedDict filled item by item (the unpickler hashes each key); its
    keys may be tuples no Python dict could be built with in reasonable time."""

    def __init__(self, items) -> None:
        self.items = items

    def __reduce__(self):
        return collections.OrderedDict, (), None, None, iter(self.items)


def dtype(code: str) -> Call:
    """A numpy dtype as a pickle written by hand gives it: `numpy.dtype(code)` with no
    state (torch refuses to set the state of a dtype class the reader does not allow)."""
    return Call(np.dtype, code, False, True)


def shared_tuple(levels: int, leaf=()):
    """A tuple holding the previous level twice, `levels` deep: written in a few bytes a
    level (the pickle memo writes each level once), 2^levels tuples to hash or walk."""
    value = leaf
    for _ in range(levels):
        value = (value, value)
    return value


def shared_list(levels: int) -> list:
    value: list = []
    for _ in range(levels):
        value = [value, value]
    return value


def payloads() -> dict[str, object]:
    """name -> the hostile value each file stores next to a real state dict ('x')."""
    return {
        'size_numpy_int': Call(bytearray, np.int64(SIZE)),
        'alloc_ndarray': Call(np.ndarray, (SIZE // 8,), np.dtype('f8')),
        'alloc_reconstruct': Call(_reconstruct, np.ndarray, (8,), dtype(f'V{SIZE // 8}')),
        'object_array': Call(_reconstruct, np.ndarray, (0,), b'b',
                             state=(1, (3,), dtype('O8'), False, [1, 'a', None])),
        'shared_key': KeyedDict([(shared_tuple(16), 1)]),
        'shared_expansion': shared_list(40),
    }


def build_budget_corpus(root: Path) -> dict[str, Path]:
    """name -> file under `root`, for every name of `BUDGET_EXPECTED`."""
    files = {}
    for name, value in payloads().items():
        for suffix, zipped in (('', True), ('_legacy', False)):
            if f'{name}{suffix}' in BUDGET_EXPECTED:
                files[f'{name}{suffix}'] = root / f'{name}{suffix}.pth'
                torch.save({**WEIGHTS, 'x': value}, files[f'{name}{suffix}'],
                           _use_new_zipfile_serialization=zipped)
    hostile = {**WEIGHTS, 'x': Call(bytearray, SIZE)}
    files['zip_pickle_twice'] = root / 'zip_pickle_twice.pth'  # (no storage: see pickle_twice)
    files['zip_pickle_twice'].write_bytes(pickle_twice({'x': Call(bytearray, SIZE)}, {}))
    files['legacy_then_zip'] = root / 'legacy_then_zip.pth'
    files['legacy_then_zip'].write_bytes(torch_bytes(hostile, zipped=False) +
                                         torch_bytes(WEIGHTS))
    assert set(files) == set(BUDGET_EXPECTED)
    return files


def torch_bytes(obj, zipped: bool = True) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=zipped)
    return buf.getvalue()


def pickle_twice(read: object, checked: object) -> bytes:
    """A torch zip archive whose data.pkl appears twice: `read`'s first, `checked`'s last
    (the one Python's zipfile opens by that name). torch's reader finds one of the two by a
    binary search over the names sorted by an unstable sort: with `read` holding no storage
    (7 entries in all) it finds the first, as `test_the_payloads_are_live` checks."""
    with zipfile.ZipFile(io.BytesIO(torch_bytes(read))) as first, \
            zipfile.ZipFile(io.BytesIO(torch_bytes(checked))) as last:
        entries = [(n, first.read(n)) for n in first.namelist()]
        pkl = next(n for n in last.namelist() if n.endswith('/data.pkl'))
        entries.append((pkl, last.read(pkl)))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, 'w') as out, warnings.catch_warnings():
        warnings.simplefilter('ignore')  # zipfile's note on the name written twice
        for name, data in entries:
            out.writestr(name, data)
    return buf.getvalue()


def legacy_bytes(obj_pickle: bytes, keys_pickle: bytes = pickle.dumps([], protocol=2)) -> bytes:
    """A legacy torch file (torch < 1.6) made of its five pickles: magic number, protocol,
    system info, the object, its storage keys (no storages follow)."""
    from torch.serialization import MAGIC_NUMBER, PROTOCOL_VERSION
    info = dict(protocol_version=PROTOCOL_VERSION, little_endian=sys.byteorder == 'little',
                type_sizes=dict(short=2, int=4, long=4))
    head = b''.join(pickle.dumps(v, protocol=2) for v in (MAGIC_NUMBER, PROTOCOL_VERSION, info))
    return head + obj_pickle + keys_pickle


def process_killers(root: Path, levels: int = 40) -> dict[str, Path]:
    """The files that hang or crash a loader without the check: a dict key of `levels`
    nested levels of one shared tuple (2^levels tuples to hash) in a zip archive, in a legacy
    file and in a legacy file's storage-key pickle (read after the object); an object array
    whose state names 2^20 items and holds none (numpy 1.26 crashes on it)."""
    key = KeyedDict([(shared_tuple(levels), 1)])
    crash = Call(_reconstruct, np.ndarray, (0,), b'b',
                 state=(1, (1 << 20,), dtype('O8'), False, []))
    files = {'dag_key_zip': torch_bytes({**WEIGHTS, 'x': key}),
             'dag_key_legacy': torch_bytes({**WEIGHTS, 'x': key}, zipped=False),
             'dag_key_in_storage_keys': legacy_bytes(pickle.dumps({'x': 1}, protocol=2),
                                                     pickle.dumps(key, protocol=2)),
             'object_array_crash': torch_bytes({**WEIGHTS, 'x': crash})}
    paths = {}
    for name, data in files.items():
        paths[name] = root / f'{name}.pth'
        paths[name].write_bytes(data)
    return paths
