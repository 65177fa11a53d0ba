"""Compatibility of mmengine 0.10.7 with torch >= 2.6, kept in one place.

torch >= 2.6 loads checkpoints with `weights_only=True`; mmengine's resume then fails with
`UnpicklingError: Weights only load failed`, because its checkpoints carry a few non-tensor
objects in `meta` and `message_hub`. Instead of turning the safe loader off, we allow-list
exactly those types; any other pickled object still fails loudly. mmengine also pickles the
bound statistics methods of its HistoryBuffers, which no safe unpickler can rebuild; the
checkpoints our launchers save drop them (`weights_only_message_hub`, on the checkpoint's own
copies), and nothing of mmengine is patched.

mmengine reads every checkpoint (`load_from`, `resume`, `init_cfg` Pretrained, the hosts'
backbones) through `CheckpointLoader`; its http(s) loader unpickles any object (the
weights-only loader is off), and its Runner executes the config text an mmcv 1.x checkpoint stores
(`meta['config']`) when resuming. `route_mmengine_checkpoints` registers, with mmengine's
public `CheckpointLoader.register_scheme`, one loader for every scheme that reads through
`peco_mm.checkpoint.read_checkpoint` (the project's one gate), and refuses the
remote schemes it cannot read safely.
"""
from __future__ import annotations

import os

import torch

from .reader import mmengine_checkpoint_types, read_checkpoint
from .stored_config import parse_config_text


def weights_only_message_hub(hub_state: dict) -> dict:
    """Put a stand-in for each HistoryBuffer of a message hub's `state_dict()` (in place) that
    pickles as that HistoryBuffer without mmengine's built-in statistics methods, so that the
    checkpoint loads with `weights_only=True` (as a plain HistoryBuffer); returns `hub_state`.

    mmengine pickles `_statistics_methods` (min/max/current/mean), which an unpickler can only
    rebuild through `getattr`; allow-listing `getattr` would reopen arbitrary code execution.
    `__init__`/`__setstate__` register the built-ins again, so they are dropped; only
    user-registered methods are still saved (and then need a trusted load). Nothing of
    mmengine is changed: not HistoryBuffer, not the runner's buffers. The launchers'
    checkpoint hook calls it on every checkpoint (`before_save_checkpoint`).
    """
    from mmengine.logging import HistoryBuffer

    scalars = hub_state.get('log_scalars') or {}
    for key, buf in scalars.items():
        if isinstance(buf, HistoryBuffer):
            scalars[key] = PickledAsHistoryBuffer(buf)
    return hub_state


class PickledAsHistoryBuffer:
    """Pickles as a HistoryBuffer with `buf`'s data, less the built-in statistics methods."""

    def __init__(self, buf) -> None:
        self.cls = type(buf)
        self.state = {k: v for k, v in vars(buf).items() if k != 'statistics_methods'}
        custom = {k: m for k, m in buf._statistics_methods.items()
                  if getattr(self.cls, k, None) is not m}
        if custom:
            self.state['statistics_methods'] = custom

    def __reduce_ex__(self, protocol: int) -> tuple:
        return self.cls, (), self.state  # HistoryBuffer(), then its __setstate__(state)


def allow_mmengine_checkpoints() -> None:
    """Make mmengine checkpoints loadable with torch's weights-only unpickler (idempotent):
    allow-list their few types. Nothing else in mmengine is changed."""
    add = getattr(torch.serialization, 'add_safe_globals', None)
    if add is not None:
        add(mmengine_checkpoint_types())


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
