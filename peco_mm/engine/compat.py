"""Compatibility of mmengine 0.10.7 with torch >= 2.6, kept in one place.

torch >= 2.6 loads checkpoints with `weights_only=True`; mmengine's resume then fails with
`UnpicklingError: Weights only load failed`, because its checkpoints carry a few non-tensor
objects in `meta` and `message_hub`. Instead of turning the safe loader off, we allow-list
exactly those types; any other pickled object still fails loudly. mmengine also pickles the
bound statistics methods of its HistoryBuffers, which no safe unpickler can rebuild; the
checkpoints our launchers save drop them (`history_buffers_without_methods`), and nothing is
patched at import.
"""
from __future__ import annotations

import contextlib

import torch


def _mmengine_checkpoint_types() -> list:
    import numpy as np
    from mmengine.logging import HistoryBuffer

    types: list = [HistoryBuffer, np.ndarray, np.dtype]
    # numpy scalars and arrays pickle through these reconstructors / dtype classes
    try:  # numpy >= 2 moved the reconstructors to numpy._core
        from numpy._core import multiarray
        multiarray._reconstruct
    except (ImportError, AttributeError):
        from numpy.core import multiarray
    types += [multiarray._reconstruct, multiarray.scalar]
    types += [type(np.dtype(t)) for t in (np.float64, np.float32, np.int64, np.int32,
                                          np.bool_, np.uint8)]
    try:
        from mmengine.config import ConfigDict
        types.append(ConfigDict)
    except ImportError:  # pragma: no cover
        pass
    import collections
    types += [collections.OrderedDict, collections.defaultdict]
    return types


def _history_buffer_getstate(self) -> dict:
    """HistoryBuffer state without its built-in statistics methods.

    mmengine pickles `_statistics_methods` (min/max/current/mean), which the unpickler can only
    rebuild through `getattr`; allow-listing `getattr` would reopen arbitrary code execution.
    The built-ins are re-registered by `__init__`/`__setstate__` anyway, so they are dropped;
    only user-registered methods would still be saved (and then need a trusted load).
    """
    from mmengine.logging import HistoryBuffer

    state = {k: v for k, v in self.__dict__.items() if k != 'statistics_methods'}
    custom = {k: m for k, m in self._statistics_methods.items()
              if getattr(HistoryBuffer, k, None) is not m}
    if custom:
        state['statistics_methods'] = custom
    return state


def allow_mmengine_checkpoints() -> None:
    """Make mmengine checkpoints loadable with torch's weights-only unpickler (idempotent):
    allow-list their few types. Nothing else in mmengine is changed."""
    add = getattr(torch.serialization, 'add_safe_globals', None)
    if add is not None:
        add(_mmengine_checkpoint_types())


@contextlib.contextmanager
def history_buffers_without_methods():
    """While saving a checkpoint: pickle mmengine's HistoryBuffers without their built-in
    statistics methods, so that the file loads with `weights_only=True`. Restores
    HistoryBuffer afterwards; the launchers' checkpoint hook saves inside this context."""
    from mmengine.logging import HistoryBuffer

    had = '__getstate__' in HistoryBuffer.__dict__
    old = HistoryBuffer.__dict__.get('__getstate__')
    HistoryBuffer.__getstate__ = _history_buffer_getstate
    try:
        yield
    finally:
        if had:
            HistoryBuffer.__getstate__ = old
        else:
            del HistoryBuffer.__getstate__
