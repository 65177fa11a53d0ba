"""How much one checkpoint read may allocate, and how large and deep what it holds may be.

torch's weights-only unpickler runs nothing but a few allow-listed constructors, yet those
can be asked for any size: `bytearray(1_500_000_000)` takes 350 bytes of pickle, a
`torch.FloatTensor(n)`, a storage or a numpy array as many bytes as `n` says, and a zip
archive's compressed entries unpack to far more than the file's size; a dict key built of
one tuple shared 40 times over makes the unpickler hash 2^40 tuples. Before torch reads a
file, `check_read_budget` reads it the way torch will, without running anything:

- the format by the first bytes, as torch decides it (a zip archive, or a legacy file);
- in a zip archive, every entry name once (readers disagree on which of two entries of one
  name counts), the unpacked size of every entry, and the pickle torch reads (`data.pkl` in
  the folder of the archive's first entry); in a legacy file its five pickles;
- from the pickle opcodes (`pickle_model`, played on a model of the unpickler's stack):
  every storage and every allow-listed constructor's allocation, sizes that are plain
  numbers, dict keys and set items of plain values, numpy arrays of numbers only, and an
  object graph that shared references expand by at most `MAX_SHARED_EXPANSION` objects
  beyond those the file writes;

and refuses the file, in one line naming it, when any fails or the allocations add up to
more than the budget: twice the file's size plus `PECO_MM_READ_BUDGET_MB` (256 MiB by
default). A real checkpoint allocates about its own size. After the read, `check_nesting`
refuses data nested deeper than `MAX_NESTING` levels (walked once per shared object, never
recursively), which every later recursive walk (repr, copy, comparison) would fail on.
"""
from __future__ import annotations

import io
import os
import zipfile

from .pickle_model import MAX_SHARED_EXPANSION, PickleModel, Refusal

BUDGET_ENV = 'PECO_MM_READ_BUDGET_MB'
DEFAULT_BUDGET_MB = 256
MAX_NESTING = 100
# a legacy torch file: magic number, protocol, system info, the object, its storage keys
LEGACY_PICKLES = 5
ZIP_MAGIC = b'PK\x03\x04'  # torch reads a file as a zip archive when it begins so
__all__ = ['BUDGET_ENV', 'MAX_SHARED_EXPANSION', 'check_nesting', 'check_read_budget',
           'read_limit', 'torch_pickle_member']


def read_limit(path: str) -> int:
    """The most bytes a read of `path` may allocate: twice its size plus the budget."""
    mb = float(os.environ.get(BUDGET_ENV, DEFAULT_BUDGET_MB))
    return 2 * os.path.getsize(path) + int(mb * 2**20)


def check_read_budget(path: str) -> None:
    """Raise ValueError (one line naming `path`) when reading it would allocate more than
    `read_limit`, or its pickle holds what `pickle_model` refuses (a size that is no plain
    number, a shared dict key, an object array, a graph that shared references blow up),
    or its zip archive names an entry twice."""
    limit = read_limit(path)
    try:
        model = play_pickles(path, limit)
    except Refusal as err:
        raise ValueError(f'{path}: {err}; not read') from None
    except Exception as err:  # noqa: BLE001 (a pickle the model cannot follow: refused)
        raise ValueError(f'{path}: the read check cannot follow its pickle '
                         f'({type(err).__name__}: {str(err)[:200]}); not read') from None
    if model.unresolved:
        raise ValueError(f'{path}: what {model.unresolved} allocates cannot be read off the '
                         'file as a plain number (a size given as a numpy integer, a call '
                         'result or a list, an unknown codec); a checkpoint gives sizes as '
                         'plain integers; not read')
    if model.total > limit:
        raise ValueError(f'{path}: reading it would allocate {model.total} bytes '
                         f'({model.largest}), {over_budget(limit)}; not read')


def over_budget(limit: int) -> str:
    return (f'more than a read may allocate ({limit} bytes: twice the file size plus '
            f'{BUDGET_ENV}={os.environ.get(BUDGET_ENV, DEFAULT_BUDGET_MB)})')


def play_pickles(path: str, limit: int) -> PickleModel:
    """The model after playing the pickles torch reads from `path`; Refusal for a zip
    archive that names an entry twice or unpacks to more than `limit` bytes."""
    model = PickleModel()
    if not is_torch_zip(path):
        with open(path, 'rb') as f:
            model.walk(f, LEGACY_PICKLES)
        return model
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError):
        return model  # no readable archive: torch's refusal says so
    with zf:
        unpacked = check_zip_entries(zf)
        if unpacked > limit:
            raise Refusal(f'its zip entries unpack to {unpacked} bytes, {over_budget(limit)}')
        member = torch_pickle_member(zf)
        if member is not None:
            with zf.open(member) as raw, io.BufferedReader(raw, 1 << 20) as f:
                model.walk(f, 1)
    return model


def is_torch_zip(path: str) -> bool:
    """Whether torch reads `path` as a zip archive: it begins with a zip entry's header
    (whatever else lies at its end: Python's zipfile looks there, torch does not)."""
    with open(path, 'rb') as f:
        return f.read(len(ZIP_MAGIC)) == ZIP_MAGIC


def check_zip_entries(zf: zipfile.ZipFile) -> int:
    """The bytes `zf`'s entries unpack to; Refusal when two entries share a name (compared
    as torch's zip reader compares them: the stored bytes, ASCII case ignored)."""
    seen: dict[bytes, int] = {}
    for info in zf.infolist():
        key = raw_name(info).lower()
        seen[key] = seen.get(key, 0) + 1
    twice = [(name, n) for name, n in seen.items() if n > 1]
    if twice:
        name, n = twice[0]
        raise Refusal(f'its zip archive holds {n} entries named {name.decode("latin-1")!r} '
                      '(zip readers disagree on which one counts); each entry name must '
                      'appear once')
    return sum(info.file_size for info in zf.infolist())


def torch_pickle_member(zf: zipfile.ZipFile) -> zipfile.ZipInfo | None:
    """The entry torch unpickles: `data.pkl` in the folder of the archive's first entry
    (None when there is none: torch refuses the file itself)."""
    infos = zf.infolist()
    if not infos or b'/' not in raw_name(infos[0]):
        return None
    wanted = raw_name(infos[0]).split(b'/', 1)[0].lower() + b'/data.pkl'
    return next((info for info in infos if raw_name(info).lower() == wanted), None)


def raw_name(info: zipfile.ZipInfo) -> bytes:
    """An entry's name as stored (Python's `filename` is cut at a NUL byte, torch's is not)."""
    return info.orig_filename.encode('utf-8' if info.flag_bits & 0x800 else 'cp437')


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
