"""Checkpoints as plain data: what torch's weights-only unpickler reads with no allow-list.

mmengine 0.10.7 pickles its message hub's `HistoryBuffer` objects (and numpy scalars such as
`runtime_info.eta`) into every checkpoint, so `torch.load(path)` on torch >= 2.6, and with
it `mmengine.runner.load_checkpoint`, mmdet's `init_detector`, mmseg's `init_model` and
mmpretrain's inferencers, refuse the file in a process of their own. The launcher's
checkpoint hook stores each buffer as a plain dict instead (`plain_checkpoint`) and turns it
back into a HistoryBuffer with the same values when a run resumes
(`history_buffers_restored`), so the resumed run logs as an uninterrupted one.

Plain data: tensors, numbers, strings, bytes, None, lists, tuples, dicts (OrderedDict,
Counter), sets; numpy scalars become Python numbers, numpy arrays tensors (same dtype),
other dict / list / tuple subclasses (ConfigDict, defaultdict, named tuples) the plain
container. Anything else is refused with the key that holds it.
"""
from __future__ import annotations

import collections

import numpy as np
import torch

# a HistoryBuffer as plain data: its logged values and counts (tensors of the buffer's numpy
# dtype, so that the values come back bit for bit) and its length limit
BUFFER_KEYS = ('log_history', 'count_history', 'max_length')
# what torch's weights-only unpickler rebuilds without an allow-list, besides tensors
PLAIN_LEAVES = (str, bytes, bytearray, bool, int, float, complex, type(None))
PLAIN_DICTS = (dict, collections.OrderedDict, collections.Counter)


def plain_checkpoint(ckpt: dict) -> dict:
    """`ckpt` (a checkpoint dict about to be saved) as plain data, in place where it is a
    plain dict already: every HistoryBuffer of `message_hub.log_scalars` becomes a dict of
    `BUFFER_KEYS`, and every other value `as_plain`; returns `ckpt`."""
    hub = ckpt.get('message_hub')
    scalars = hub.get('log_scalars') if isinstance(hub, dict) else None
    if isinstance(scalars, dict):
        hub['log_scalars'] = {key: plain_history_buffer(buf, f'message_hub.log_scalars.{key}')
                              for key, buf in scalars.items()}
    for key in list(ckpt):
        ckpt[key] = as_plain(ckpt[key], str(key))
    return ckpt


def plain_history_buffer(buf, where: str):
    """A HistoryBuffer as a dict of `BUFFER_KEYS` (anything else: `as_plain`)."""
    from mmengine.logging import HistoryBuffer
    if not isinstance(buf, HistoryBuffer):
        return as_plain(buf, where)
    logs, counts = buf.data
    return dict(log_history=array_tensor(logs, f'{where}.log_history'),
                count_history=array_tensor(counts, f'{where}.count_history'),
                max_length=int(buf.max_length))


def history_buffers_restored(hub_state) -> int:
    """Turn the plain buffers of a message hub's saved state (`plain_history_buffer`) back
    into HistoryBuffers with the same values, dtypes and length limit, in place, before
    mmengine's `MessageHub.load_state_dict` takes them; returns how many."""
    from mmengine.logging import HistoryBuffer
    scalars = hub_state.get('log_scalars') if isinstance(hub_state, dict) else None
    restored = 0
    for key, value in (scalars.items() if isinstance(scalars, dict) else ()):
        if isinstance(value, dict) and set(value) == set(BUFFER_KEYS):
            logs, counts, limit = (value[k] for k in BUFFER_KEYS)
            if not (torch.is_tensor(logs) and torch.is_tensor(counts) and logs.dim() == 1
                    and logs.shape == counts.shape and type(limit) is int and limit > 0):
                raise ValueError(f'message_hub.log_scalars.{key}: expected log_history and '
                                 'count_history as 1-d tensors of one length and max_length '
                                 f'as an int > 0, got {value!r:.200}')
            scalars[key] = HistoryBuffer(value['log_history'].numpy().copy(),
                                         value['count_history'].numpy().copy(),
                                         max_length=int(value['max_length']))
            restored += 1
    return restored


def as_plain(obj, where: str):
    """`obj` as plain data (see the module's docstring); tensors and plain leaves as they
    are. Raises TypeError naming `where` (the key path) for an object it cannot express."""
    if torch.is_tensor(obj) or type(obj) in PLAIN_LEAVES:
        return obj
    if isinstance(obj, np.generic):  # float64(0.5) -> 0.5, exactly
        return obj.item()
    if isinstance(obj, np.ndarray):
        return array_tensor(obj, where)
    if isinstance(obj, dict):
        return plain_dict(obj, where)
    if isinstance(obj, (list, tuple, set, frozenset)):
        values = [as_plain(v, f'{where}[{i}]') for i, v in enumerate(obj)]
        if isinstance(obj, list):
            return values
        return set(values) if isinstance(obj, (set, frozenset)) else tuple(values)
    if isinstance(obj, PLAIN_LEAVES):  # a str / int / float subclass (an enum, a path)
        return next(t for t in PLAIN_LEAVES if isinstance(obj, t))(obj)
    raise TypeError(f'checkpoint key {where}: a {type(obj).__module__}.'
                    f'{type(obj).__qualname__} object is not plain data (tensors, numbers, '
                    'strings, lists, tuples, dicts); store it as such so that the checkpoint '
                    'loads with torch.load(weights_only=True)')


def plain_dict(obj: dict, where: str) -> dict:
    """A dict of plain data: a dict, OrderedDict or Counter with plain keys changed in place
    (a state dict keeps its `_metadata`), any other mapping (ConfigDict, defaultdict) copied
    into a dict."""
    if type(obj) in PLAIN_DICTS and all(type(k) in PLAIN_LEAVES for k in obj):
        for key, value in obj.items():
            plain = as_plain(value, f'{where}.{key}')
            if plain is not value:
                obj[key] = plain
        return obj
    return {as_plain(k, f'{where} (a key)'): as_plain(v, f'{where}.{k}')
            for k, v in obj.items()}


def array_tensor(arr: np.ndarray, where: str) -> torch.Tensor:
    """A numpy array as a tensor of the same dtype and values (a copy)."""
    try:
        return torch.from_numpy(np.array(arr, copy=True))
    except TypeError:
        raise TypeError(f'checkpoint key {where}: a numpy array of dtype {arr.dtype} has no '
                        'tensor form; store it as numbers or strings') from None


def holds_history_buffers(ckpt) -> bool:
    """Whether `ckpt` (as the gate read it) is in the form written before checkpoints were
    plain data: its message hub holds HistoryBuffer objects."""
    from mmengine.logging import HistoryBuffer
    hub = ckpt.get('message_hub') if isinstance(ckpt, dict) else None
    scalars = hub.get('log_scalars') if isinstance(hub, dict) else None
    return isinstance(scalars, dict) and any(isinstance(v, HistoryBuffer)
                                             for v in scalars.values())


def rewrite_as_plain(path: str, out: str | None = None) -> str:
    """Rewrite the checkpoint `path` (read through the gate, `read_checkpoint`) as plain data
    into `out` (default: `path` itself, replaced atomically); returns what was done, in one
    line. The result is checked to load with `torch.load(weights_only=True)`."""
    import os

    from .reader import read_checkpoint
    ckpt = read_checkpoint(path)
    if not isinstance(ckpt, dict):
        raise ValueError(f'{path}: holds a {type(ckpt).__name__}, not a checkpoint dict')
    dst = out or path
    if dst == path and is_plain_file(path):
        return f'{path}: already plain data, left as it is'
    part = f'{dst}.part'
    try:
        torch.save(plain_checkpoint(ckpt), part)
        if not is_plain_file(part):
            raise ValueError(f'{path}: its plain form does not load with '
                             'torch.load(weights_only=True); nothing was written')
        os.replace(part, dst)
    finally:
        if os.path.exists(part):
            os.remove(part)
    return f'{path}: rewritten as plain data -> {dst}'


def is_plain_file(path: str) -> bool:
    """Whether torch's weights-only loader, with no allow-list, reads `path`."""
    import pickle
    import zipfile
    try:
        torch.load(path, map_location='cpu', weights_only=True, mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError:
        return False
    return True
