"""Keep freed CPU memory in the process for the next tensor (glibc only).

glibc hands a large block (a tensor of more than 128 KiB to 32 MiB, the dynamic threshold)
straight back to the kernel when it is freed, so the next tensor of that size is faulted in
again page by page, and zeroed by the kernel. A training step on the CPU frees and allocates
its activations every step: on the 2-core machine of docs/benchmarks.md a PeCo tokenizer encode
at batch 8 took 2.3 million page faults and about a quarter of its time in the kernel.
`reuse_freed_memory` tells glibc (mallopt) to serve every block from its heap, to keep up to
2 GiB of free heap instead of returning it, and to grow the heap 64 MiB at a time. The price
is a resident size that stays at the step's peak (plus fragmentation, +10 to +20 % measured)
instead of shrinking between steps.

Config: `env_cfg.cpu_malloc` in any config run by tools/train.py or tools/test.py:
  'auto'  (default) 'reuse' when CUDA is not available, else 'stock'
  'reuse' always; 'stock' never (glibc's defaults)
"""
from __future__ import annotations

import ctypes
import ctypes.util

MODES = ('auto', 'reuse', 'stock')
# mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4
KEEP_FREE = 2**31 - 1  # bytes of free heap top kept before trimming (mallopt takes a C int)
GROW_BY = 64 * 2**20   # extra bytes asked of the kernel each time the heap grows


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6')
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        return libc
    except (OSError, AttributeError):  # not glibc (musl has no mallopt, macOS no libc.so)
        return None


def reuse_freed_memory() -> bool:
    """Set glibc's allocator to keep freed memory (see the module doc). Process-wide and not
    undone. Returns False where it cannot apply (no glibc `mallopt`, or glibc refused)."""
    libc = _libc()
    if libc is None:
        return False
    return all(libc.mallopt(param, value) == 1 for param, value in
               ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, KEEP_FREE), (M_TOP_PAD, GROW_BY)))


def resolve_mode(mode: str, cuda: bool) -> str:
    """'auto' -> 'reuse' without CUDA, 'stock' with it; other modes are checked and kept."""
    if mode not in MODES:
        raise ValueError(f'env_cfg.cpu_malloc={mode!r}: expected one of {MODES}')
    return ('stock' if cuda else 'reuse') if mode == 'auto' else mode


def apply_cpu_malloc(mode: str, cuda: bool) -> str | None:
    """Apply `env_cfg.cpu_malloc`; the one line to log, or None when nothing was done."""
    if resolve_mode(mode, cuda) == 'stock':
        return None
    if not reuse_freed_memory():
        return f"env_cfg.cpu_malloc={mode!r}: not applied (this C library has no glibc mallopt)"
    return (f"env_cfg.cpu_malloc={mode!r}: freed CPU memory is kept for reuse (glibc mallopt); "
            "set env_cfg.cpu_malloc='stock' to return it to the system")
