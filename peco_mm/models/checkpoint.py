"""Reading checkpoint files, one way for the whole project.

Pure: imports no model. `read_checkpoint` reads any file (torch pickles with the weights-only
unpickler plus the few mmengine types its checkpoints carry, or safetensors); `unwrap`,
`strip_prefix` and `select_prefix` take a state dict out of its nesting and prefixes. The
format-specific choices (which nesting, which prefix) live in `peco_mm.models.convert`.
"""
from __future__ import annotations

import os
import pickle
from typing import Callable

import torch

# where training scripts nest a state dict, in the order `unwrap` looks
NESTING_KEYS = ('state_dict', 'model', 'module')
# every nesting key a ViT checkpoint may use (DINO: teacher / student; timm: *_ema)
WRAPPER_KEYS = ('state_dict', 'model', 'module', 'teacher', 'student', 'state_dict_ema',
                'model_ema')


def read_checkpoint(path: str, unsafe_pickle: bool = False,
                    warn: Callable[[str], None] | None = None) -> dict:
    """torch.load with weights_only=True (or safetensors); arbitrary pickles only when asked.

    mmengine checkpoints load safely: their few non-tensor types (meta, message_hub) are
    allowed for this call only. Any other pickled object is refused with a ValueError that
    names the file, unless `unsafe_pickle` (then `warn` is told).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f'checkpoint not found: {path}')
    if path.endswith('.safetensors'):
        from safetensors.torch import load_file
        return load_file(path, device='cpu')
    try:
        # only the types not yet allowed: leaving the context removes what it added, and
        # `import peco_mm` has allowed them for mmengine's own resume already
        allowed = torch.serialization.get_safe_globals()
        extra = [t for t in _mmengine_types() if t not in allowed]
        with torch.serialization.safe_globals(extra):
            return torch.load(path, map_location='cpu', weights_only=True)
    except pickle.UnpicklingError as err:
        if not unsafe_pickle:
            first = str(err).strip().splitlines()
            raise ValueError(
                f'{path} holds pickled Python objects that the safe loader refuses '
                f'({first[0][:200] if first else type(err).__name__}). If you trust the '
                'file, load it with unsafe_pickle=True (tools/convert_checkpoint.py '
                '--unsafe-pickle) and keep the converted, tensors-only file') from err
    (warn or log)(f'WARNING: {path} is loaded with weights_only=False: this runs arbitrary '
                  'code from the file; only do it for files you trust')
    return torch.load(path, map_location='cpu', weights_only=False)


def _mmengine_types() -> list:
    """The types mmengine checkpoints pickle besides tensors (meta, message_hub)."""
    try:
        from ..engine.compat import _mmengine_checkpoint_types
    except ImportError:  # pragma: no cover
        return []
    return _mmengine_checkpoint_types()


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
