"""Reading checkpoint files, one way for the whole project.

Pure: imports no model. `read_checkpoint` is the one gate every weights file passes, whoever
asks (the tools, `PeCoViT.from_checkpoint`, the tokenizer, the perceptual network, and, through the
loader `peco_mm.checkpoint` registers with mmengine, `load_from`, `resume` and every
`init_cfg` Pretrained). It reads local files and http(s):// URLs (downloaded once into torch
hub's cache) with torch's weights-only unpickler plus the few mmengine types its
checkpoints carry (or safetensors), says what is wrong with a file that is empty, not a torch
checkpoint, truncated or holds pickled objects (which the converter and DALL-E's reader take
as inert stand-ins: nothing read from a file is ever run), and reads the config text a
checkpoint stores (`meta.cfg`, `meta.config`, `message_hub.runtime_info.cfg`) as data
(`peco_mm.checkpoint`), refusing any that is not. `unwrap`, `strip_prefix` and
`select_prefix` take a state dict out of its nesting and prefixes; the format-specific
choices live in `peco_mm.checkpoint`.
"""
from __future__ import annotations

import collections
import os
import pickle
import re
import struct
import zipfile
from typing import Callable

import torch

from .budget import check_nesting, check_read_budget
from .stored_config import parse_config_text

# where training scripts nest a state dict, in the order `unwrap` looks
NESTING_KEYS = ('state_dict', 'model', 'module')
# every nesting key a ViT checkpoint may use (DINO: teacher / student; timm: *_ema)
WRAPPER_KEYS = ('state_dict', 'model', 'module', 'teacher', 'student', 'state_dict_ema',
                'model_ema')
URL_PREFIXES = ('http://', 'https://')
# the config text mmengine (cfg) and mmcv 1.x (config) runs store in meta (mmengine also keeps
# a copy of it in message_hub.runtime_info.cfg)
STORED_CONFIG_KEYS = ('cfg', 'config')
ZIP_MAGIC = b'PK\x03\x04'  # torch.save's default format is a zip archive
LEGACY_MAGIC = pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2)  # torch < 1.6 files begin so
# torch hub's check_hash convention: NAME-<sha256 prefix>.EXT (8+ hex digits, so that e.g.
# 'resnet-50.pth' is not taken for a hash)
HASH_IN_NAME = re.compile(r'-([a-f0-9]{8,})\.')
# what torch's unpickler raises on bytes it cannot make sense of
UNREADABLE = (EOFError, RuntimeError, OSError, TypeError, KeyError, IndexError,
              AttributeError, MemoryError, OverflowError, struct.error)


def read_checkpoint(path: str, inert_objects: bool = False,
                    warn: Callable[[str], None] | None = None, *,
                    map_location='cpu', mmap: bool = False):
    """Read a checkpoint file or http(s):// URL without running anything from it.

    torch.load with weights_only=True (or safetensors); mmengine checkpoints load safely,
    their few non-tensor types (meta, message_hub) are allowed for this call only. Any other
    pickled object, a file that is empty, not a torch checkpoint, truncated, over its read
    budget or nested too deep (`.budget`), and stored config text that is not plain data are
    refused with a one-line ValueError naming the file. With `inert_objects=True` (the
    converter, DALL-E's pickled modules) the other pickled objects are read as inert
    stand-ins (`.inert`: the same unpickler, nothing of them runs); `warn` is told which.

    Args:
        path: a local file, or an http(s):// URL (see `fetch_url`).
        map_location: as torch.load's.
        mmap: map the tensors instead of reading them (zip files; e.g. to read only meta).
    Returns: what the file holds (with `inert_objects`, a pickled module is its stand-in).
    """
    path = os.fspath(path)
    if is_url(path):
        path = fetch_url(path)
    elif '://' in path:
        raise ValueError(f'{path}: checkpoints are read from local files and http(s):// URLs '
                         'only; copy the file to local disk and pass its path')
    if not os.path.isfile(path):
        raise FileNotFoundError(f'checkpoint not found: {path}')
    if path.endswith('.safetensors'):
        return _read_safetensors(path)
    problem = file_problem(path)
    if problem:
        raise ValueError(f'{path}: {problem}')
    check_read_budget(path)  # sizes read off the opcodes, before anything is allocated
    is_zip = _head(path).startswith(ZIP_MAGIC)
    try:
        # mmengine's checkpoint types allowed for this read only: leaving the context removes
        # what it added (types a caller already allowed stay as they were)
        allowed = torch.serialization.get_safe_globals()
        extra = [t for t in mmengine_checkpoint_types() if t not in allowed]
        with torch.serialization.safe_globals(extra):
            try:
                ckpt = torch.load(path, map_location=map_location, weights_only=True,
                                  mmap=mmap and is_zip)
            except pickle.UnpicklingError as err:
                if not inert_objects:
                    raise ValueError(
                        f'{path} holds pickled Python objects that the weights-only loader '
                        f'refuses ({_refusal_reason(err)}). For ViT weights, convert it '
                        'once with tools/convert_checkpoint.py, which reads them as inert '
                        'stand-ins (nothing of them runs), and use the converted, tensors-only '
                        "file; DALL-E's pickled encoder.pkl / decoder.pkl are read so by "
                        'DalleTokenizer (see docs/security.md)') from None
                ckpt = _read_with_stand_ins(path, map_location, warn)
    except UNREADABLE as err:
        first = (str(err).strip().splitlines() or [''])[0][:200]
        raise ValueError(f'{path}: unreadable torch checkpoint, truncated or corrupt '
                         f'({type(err).__name__}: {first})') from None
    check_nesting(ckpt, path)
    check_stored_config(ckpt, path)
    return ckpt


def is_url(path) -> bool:
    """An http(s):// address, which `read_checkpoint` downloads and reads like a file."""
    return str(path).startswith(URL_PREFIXES)


def _read_with_stand_ins(path: str, map_location, warn):
    """`path` with its pickled objects as inert stand-ins (`inert_objects=True`)."""
    from .inert import load_with_stand_ins
    try:
        ckpt, stood_in = load_with_stand_ins(path, map_location)
    except pickle.UnpicklingError as err:
        if 'persistent_load of storage' in str(err):  # a legacy file's module source records
            raise ValueError(
                f'{path}: a module pickled in the legacy format (torch < 1.6) carries its '
                'source code, which the weights-only unpickler does not read; in an '
                'environment you trust, save its state_dict() and give that file') from None
        raise ValueError(f'{path} holds pickled Python objects that the weights-only loader '
                         f'refuses, even as inert stand-ins ({_refusal_reason(err)})') from None
    if stood_in:
        (warn or log)(f'{path}: {", ".join(stood_in)} read as inert stand-ins (data kept, '
                      'nothing of them run)')
    return ckpt


def file_problem(path: str) -> str | None:
    """What makes `path` no torch checkpoint, judged from its bytes without unpickling
    (None: it looks like one): empty, neither a zip archive nor a legacy torch file, or a
    zip archive cut short."""
    size = os.path.getsize(path)
    if size == 0:
        return 'empty file (0 bytes), not a checkpoint'
    head = _head(path)
    if head.startswith(ZIP_MAGIC):
        try:
            with zipfile.ZipFile(path):
                return None
        except (zipfile.BadZipFile, OSError, EOFError):
            return f'truncated or corrupt zip archive ({size} bytes), not a readable checkpoint'
    if head.startswith(LEGACY_MAGIC):
        return None
    return (f'not a torch checkpoint ({size} bytes that are neither a zip archive nor a legacy '
            'torch file)')


def check_stored_config(ckpt, path: str) -> None:
    """Refuse a checkpoint whose stored config text (meta.cfg / meta.config, and the copy in
    message_hub.runtime_info.cfg) is not plain data (see `peco_mm.checkpoint`);
    nothing in it is run."""
    if not isinstance(ckpt, dict):
        return
    meta = ckpt.get('meta')
    hub = ckpt.get('message_hub')
    info = hub.get('runtime_info') if isinstance(hub, dict) else None
    places = [(meta, f'meta.{key}', key) for key in STORED_CONFIG_KEYS]
    places.append((info, 'message_hub.runtime_info.cfg', 'cfg'))
    for holder, where, key in places:
        if isinstance(holder, dict) and isinstance(holder.get(key), str):
            parse_config_text(holder[key], f'{path} {where}')


def fetch_url(url: str) -> str:
    """The local copy of an http(s):// checkpoint in torch hub's cache
    ($TORCH_HOME/hub/checkpoints/<file name>), downloaded first when missing.

    A file name of the form NAME-<8+ hex digits>.EXT is checked against that prefix of its
    sha256 when downloaded (torch hub's `check_hash`). Under torch.distributed, rank 0
    downloads while the others wait. The file is then read like any local file.
    """
    from urllib.parse import urlparse

    from mmengine import dist
    from torch.hub import download_url_to_file, get_dir
    name = os.path.basename(urlparse(url).path)
    if not name:
        raise ValueError(f'{url}: the URL names no file')
    dst = os.path.join(get_dir(), 'checkpoints', name)
    match = HASH_IN_NAME.search(name)

    def download() -> None:
        if os.path.exists(dst):
            return
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        log(f'downloading {url} to {dst}')
        try:
            download_url_to_file(url, dst, match.group(1) if match else None, progress=False)
        except RuntimeError as err:  # torch hub's hash check
            raise ValueError(f'{url}: {err}; the download was discarded') from None
        except OSError as err:  # urllib's HTTPError / URLError, a connection reset
            reason = getattr(err, 'reason', None) or err
            code = f'HTTP {err.code} ' if isinstance(getattr(err, 'code', None), int) else ''
            raise ValueError(f'{url}: download failed ({code}{reason}); nothing was kept in '
                             f'{os.path.dirname(dst)}') from None
        problem = file_problem(dst)
        if problem:  # a connection that closed early leaves a short file
            os.remove(dst)
            raise ValueError(f'{url}: the download is no readable checkpoint ({problem}: cut '
                             'short?); it was discarded, so the next run downloads it again')

    several = dist.get_world_size() > 1
    if dist.is_main_process():
        download()
    if several:
        dist.barrier()
        download()  # ranks on another node without a shared cache
    return dst


def _read_safetensors(path: str) -> dict:
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    try:
        return load_file(path, device='cpu')
    except (SafetensorError, OSError) as err:
        raise ValueError(f'{path}: unreadable safetensors file ({err})') from None


def _head(path: str) -> bytes:
    with open(path, 'rb') as f:
        return f.read(len(LEGACY_MAGIC))


def _refusal_reason(err: Exception) -> str:
    """The line of torch's weights-only error that says what it refused, without torch's
    advice to allow-list it or to turn weights-only loading off (either would run it)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    found = [ln for ln in lines if 'GLOBAL' in ln or ln.startswith('Unsupported') or
             'blocked' in ln]
    line = found[0] if found else (lines[-1] if lines else type(err).__name__)
    kept = [part for part in re.split(r'(?<=\.) ', line)
            if not re.search(r'safe_globals|weights_only|[Pp]lease use|if you trust', part)]
    reason = ' '.join(kept).rstrip('. ')[:200]
    return f'{reason}; nothing of it ran: treat the file as unsafe and never allow-list it'


def mmengine_checkpoint_types() -> list:
    """The types mmengine checkpoints pickle besides tensors (meta, message_hub): the only
    non-tensor types the weights-only unpickler is allowed to rebuild."""
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
    from mmengine.config import ConfigDict
    types += [ConfigDict, collections.OrderedDict, collections.defaultdict]
    return types


def is_state_dict(obj) -> bool:
    """A non-empty dict holding at least one tensor."""
    return isinstance(obj, dict) and bool(obj) and any(torch.is_tensor(v) for v in obj.values())


def unwrap(ckpt: dict) -> tuple[dict, str]:
    """(the state dict nested under 'state_dict' / 'model' / 'module', or ckpt itself; where)."""
    for name in NESTING_KEYS:
        if is_state_dict(ckpt.get(name)):
            return ckpt[name], f"ckpt['{name}']"
    if is_state_dict(ckpt):
        return ckpt, 'ckpt'
    raise ValueError(unknown_layout_message(ckpt))


def strip_prefix(sd: dict, prefix: str) -> dict:
    """Drop `prefix` from the keys that have it (e.g. DDP's 'module.'); keep the others."""
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in sd.items()}


def select_prefix(sd: dict, prefix: str, dropped: dict[str, str] | None = None,
                  reason: str = '') -> dict:
    """Keep only the keys under `prefix` (e.g. 'backbone.'), without it; record the others in
    `dropped` with `reason`."""
    out = {}
    for k, v in sd.items():
        if k.startswith(prefix):
            out[k[len(prefix):]] = v
        elif dropped is not None:
            dropped[k] = reason
    return out


def unknown_layout_message(ckpt: dict, expected: str = '') -> str:
    """An error message naming the top-level keys and a few keys of each nesting."""
    top = list(ckpt) if isinstance(ckpt, dict) else []
    msg = (f'unknown checkpoint format: top-level keys {top[:20]}'
           f'{" ..." if len(top) > 20 else ""}')
    for name in WRAPPER_KEYS:
        if isinstance(ckpt, dict) and isinstance(ckpt.get(name), dict):
            msg += f"; sample keys of ckpt['{name}']: {list(ckpt[name])[:8]}"
    return msg + expected


def log(msg: str) -> None:
    try:
        from mmengine.logging import print_log
        print_log(msg, logger='current')
    except ImportError:  # pragma: no cover
        print(msg)
