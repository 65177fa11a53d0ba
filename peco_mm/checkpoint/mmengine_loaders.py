"""Compatibility of mmengine 0.10.7 with torch >= 2.6, and mmengine's reads in PeCo's runs
through the gate, kept in one place.

torch >= 2.6 loads checkpoints with `weights_only=True`; mmengine's resume then fails with
`UnpicklingError: Weights only load failed`, because its checkpoints carry a few non-tensor
objects in `meta` and `message_hub`. Instead of turning the safe loader off, `read_checkpoint`
allows exactly those types for each of its reads; any other pickled object still fails loudly.
The checkpoints PeCo's launcher writes hold none of them (`peco_mm.checkpoint.plain`); files
written before, and other runs' files, are still read, with a note naming
tools/plain_checkpoint.py, which rewrites them so that every host's own loader reads them.

mmengine reads every checkpoint (`load_from`, `resume`, `init_cfg` Pretrained, the hosts'
backbones) through `CheckpointLoader`; its http(s) loader unpickles any object (the
weights-only loader is off), and its Runner executes the config text an mmcv 1.x checkpoint
stores (`meta['config']`) when resuming. PeCo's launcher and tools therefore run their runners
and models inside `checkpoints_through_gate()`: while it lasts, every scheme mmengine
registers is answered by `load_from_weights_only`, which reads through
`peco_mm.checkpoint.read_checkpoint` (the project's one gate); on leaving, every loader is the
one it was. `import peco_mm` changes nothing of mmengine or torch: other OpenMMLab models in
the process load as mmengine loads them.
"""
from __future__ import annotations

import contextlib
import os
import os.path as osp
import re
import tempfile

from .plain import holds_history_buffers
from .reader import is_url, log, read_checkpoint, select_prefix
from .stored_config import parse_config_text


# every scheme mmengine 0.10.7 registers: in PeCo's runs, all of them go through
# `load_from_weights_only`
MMENGINE_SCHEMES = ('', 'http://', 'https://', 'pavi://', r'(\S+\:)?s3://',
                    r'(\S+\:)?petrel://', 'modelzoo://', 'torchvision://', 'open-mmlab://',
                    'openmmlab://', 'mmcls://')
# the stores mmengine reads with its petrel file backend (as its own `load_from_ceph`)
PETREL_PATH = re.compile(r'(\S+:)?(s3|petrel)://')


@contextlib.contextmanager
def checkpoints_through_gate():
    """While inside, mmengine's `CheckpointLoader` reads every scheme mmengine registers
    through `read_checkpoint` (`load_from_weights_only`): `load_from`, `resume` and every
    `init_cfg` Pretrained of the models built inside. On leaving, each of those schemes has
    the loader it had before (nested uses restore each other's). Schemes a user registered
    with `CheckpointLoader` under other prefixes keep their own loader."""
    from mmengine.runner.checkpoint import CheckpointLoader

    # mmengine has no public getter of a scheme's loader: its table is read, never written
    # here (only `register_scheme` writes it)
    table = CheckpointLoader._schemes
    before = {prefix: table[prefix] for prefix in MMENGINE_SCHEMES if prefix in table}
    CheckpointLoader.register_scheme(list(before), load_from_weights_only, force=True)
    try:
        yield
    finally:
        for prefix, loader in before.items():
            CheckpointLoader.register_scheme(prefix, loader, force=True)


def load_from_weights_only(filename: str, map_location=None) -> dict:
    """mmengine's checkpoint loader for every scheme in PeCo's runs: local files, http(s)://
    URLs and the torchvision:// / open-mmlab:// / mmcls:// names that stand for URLs, and the
    remote stores (s3://, petrel://, pavi://, a prefix a user registered with mmengine's
    `register_backend`), whose bytes mmengine's file backends fetch; all read by
    `read_checkpoint`."""
    path = _model_zoo_url(filename)
    if path.startswith('mmcls://'):
        return mmcls_backbone(filename, map_location)
    if '://' not in path:
        path = osp.expanduser(path)
    elif not is_url(path):
        return read_from_store(path, map_location)
    ckpt = read_checkpoint(path, map_location=map_location)
    _plain_gpu_ids(ckpt, filename)
    note_old_form(ckpt, filename)
    return ckpt


def note_old_form(ckpt, filename: str) -> None:
    """Log one line when `ckpt` holds mmengine HistoryBuffers (written before checkpoints
    were plain data, or by another mmengine run): read here, refused by other processes."""
    if holds_history_buffers(ckpt):
        log(old_form_message(filename))


def old_form_message(filename: str) -> str:
    return (f'{filename} holds mmengine HistoryBuffer objects (a checkpoint written before '
            'checkpoints were plain data): peco_mm reads it, but torch.load(weights_only=True) '
            "and the hosts' own loaders (init_detector, init_model, inferencers) refuse it in "
            f'a process of their own; rewrite it once with: python tools/plain_checkpoint.py '
            f'{filename}')


def read_from_store(filename: str, map_location=None) -> dict:
    """A checkpoint in a remote store, fetched as mmengine fetches it (its file backends;
    pavi:// from pavi's model cloud) into a temporary file that `read_checkpoint` reads; the
    errors name `filename`."""
    with tempfile.TemporaryDirectory(prefix='peco_mm_ckpt_') as tmp:
        local = osp.join(tmp, osp.basename(filename.rstrip('/')) or 'checkpoint.pth')
        if filename.startswith('pavi://'):
            fetch_from_pavi(filename, local)
        else:
            from mmengine.fileio import get
            args = dict(backend='petrel') if PETREL_PATH.match(filename) else None
            with open(local, 'wb') as f:
                f.write(get(filename, backend_args=args))
        try:
            ckpt = read_checkpoint(local, map_location=map_location)
        except (ValueError, FileNotFoundError) as err:
            raise type(err)(str(err).replace(local, filename)) from None
    _plain_gpu_ids(ckpt, filename)
    note_old_form(ckpt, filename)
    return ckpt


def fetch_from_pavi(filename: str, local: str) -> None:
    """Download a pavi:// model to `local`, as mmengine's `load_from_pavi` does."""
    try:
        from pavi import modelcloud
    except ImportError:
        raise ImportError(f'{filename}: reading pavi:// checkpoints needs the pavi '
                          'package') from None
    modelcloud.get(filename[len('pavi://'):]).download(local)


def mmcls_backbone(filename: str, map_location=None) -> dict:
    """An mmcls://NAME checkpoint, as mmengine's `load_from_mmcls` returns it: the
    `backbone.` weights of the model the name stands for, without the prefix."""
    from mmengine.runner.checkpoint import get_mmcls_models
    url = _look_up(get_mmcls_models(), filename[len('mmcls://'):], filename)
    ckpt = read_checkpoint(url, map_location=map_location)
    sd = ckpt.get('state_dict', ckpt) if isinstance(ckpt, dict) else ckpt
    return dict(state_dict=select_prefix(sd, 'backbone.'))


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
