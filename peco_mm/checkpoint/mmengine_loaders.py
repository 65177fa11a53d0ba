"""Compatibility of mmengine 0.10.7 with torch >= 2.6, kept in one place.

torch >= 2.6 loads checkpoints with `weights_only=True`; mmengine's resume then fails with
`UnpicklingError: Weights only load failed`, because its checkpoints carry a few non-tensor
objects in `meta` and `message_hub`. Instead of turning the safe loader off, we allow-list
exactly those types; any other pickled object still fails loudly. mmengine also pickles the
bound statistics methods of its HistoryBuffers, which no safe unpickler can rebuild; the
checkpoints our launchers save drop them (`history_buffers_without_methods`), and nothing is
patched at import.

mmengine reads every checkpoint (`load_from`, `resume`, `init_cfg` Pretrained, the hosts'
backbones) through `CheckpointLoader`; its http(s) loader unpickles any object (the
weights-only loader is off), and its Runner executes the config text an mmcv 1.x checkpoint stores
(`meta['config']`) when resuming. `route_mmengine_checkpoints` registers, with mmengine's
public `CheckpointLoader.register_scheme`, one loader for every scheme that reads through
`peco_mm.checkpoint.read_checkpoint` (the project's one gate), and refuses the
remote schemes it cannot read safely.
"""
from __future__ import annotations

import contextlib
import os

import torch

from .reader import mmengine_checkpoint_types, read_checkpoint
from .stored_config import parse_config_text


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
        add(mmengine_checkpoint_types())


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


# every scheme mmengine 0.10.7 registers: all of them go through `load_from_weights_only`
MMENGINE_SCHEMES = ('', 'http://', 'https://', 'pavi://', r'(\S+\:)?s3://',
                    r'(\S+\:)?petrel://', 'modelzoo://', 'torchvision://', 'open-mmlab://',
                    'openmmlab://', 'mmcls://')


def route_mmengine_checkpoints() -> None:
    """Make mmengine read every checkpoint through `read_checkpoint` (idempotent)."""
    from mmengine.runner.checkpoint import CheckpointLoader
    CheckpointLoader.register_scheme(MMENGINE_SCHEMES, load_from_weights_only, force=True)


def load_from_weights_only(filename: str, map_location=None) -> dict:
    """mmengine's checkpoint loader for every scheme: local files, http(s):// URLs, and the
    torchvision:// / open-mmlab:// names that stand for URLs, read by `read_checkpoint`;
    pavi://, s3://, petrel:// and mmcls:// are refused."""
    import os.path as osp

    path = _model_zoo_url(filename)
    if '://' not in path:
        path = osp.expanduser(path)
    ckpt = read_checkpoint(path, map_location=map_location)
    _plain_gpu_ids(ckpt, filename)
    return ckpt


def _model_zoo_url(filename: str) -> str:
    """The URL (or file under mmengine's home) a torchvision:// / open-mmlab:// name stands
    for; other names unchanged."""
    from mmengine.runner import checkpoint as mm
    for prefix in ('torchvision://', 'modelzoo://'):
        if filename.startswith(prefix):
            return _look_up(mm.get_torchvision_models(), filename[len(prefix):], filename)
    for prefix in ('open-mmlab://', 'openmmlab://'):
        if filename.startswith(prefix):
            name = filename[len(prefix):]
            name = mm.get_deprecated_model_names().get(name, name)
            url = _look_up(mm.get_external_models(), name, filename)
            if '://' in url:
                return url
            home = os.getenv('MMENGINE_HOME') or os.path.join(
                os.getenv('XDG_CACHE_HOME', '~/.cache'), 'mmengine')  # as mmengine's
            return os.path.join(os.path.expanduser(home), url)
    return filename


def _look_up(urls: dict, name: str, filename: str) -> str:
    if name not in urls:
        raise ValueError(f'{filename}: unknown model name {name!r}')
    return urls[name]


def _plain_gpu_ids(ckpt, filename: str) -> None:
    """mmengine's Runner.resume executes `meta['config']` (mmcv 1.x checkpoints) to read
    `gpu_ids`: leave it only that value, written back from the data `read_checkpoint`
    parsed."""
    meta = ckpt.get('meta') if isinstance(ckpt, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get('config'), str):
        return
    ids = parse_config_text(meta['config'], f'{filename} meta.config').get('gpu_ids')
    if isinstance(ids, (list, tuple)) and all(type(i) is int for i in ids):
        meta['config'] = f'gpu_ids = {list(ids)!r}\n'
    else:
        del meta['config']
