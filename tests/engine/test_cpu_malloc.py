"""`env_cfg.cpu_malloc`: freed CPU memory is kept for the next tensor (glibc mallopt), which
removes the page faults of re-allocating a step's activations, and the launcher applies it."""
import subprocess
import sys

import pytest

from peco_mm.supervisor import malloc
from tests.conftest import ROOT

# allocate, touch and free a 64 MiB tensor (16384 pages of 4 KiB) 12 times to reach a steady
# state (with reuse the heap settles after a few), then count the minor page faults of 12 more
FAULTS = """
import resource, sys, torch
from peco_mm.supervisor.malloc import reuse_freed_memory
applied = reuse_freed_memory() if sys.argv[1] == 'reuse' else None
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(12):
    torch.empty(2**24).fill_(1.0)
before = faults()
for _ in range(12):
    torch.empty(2**24).fill_(1.0)
print(applied, faults() - before)
"""

glibc = pytest.mark.skipif(malloc._libc() is None, reason='glibc mallopt is not available')


def _faults(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, '-c', FAULTS, mode], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    return out[0], int(out[1])


@glibc
def test_reuse_removes_the_page_faults_of_reallocating_large_tensors():
    applied, stock = _faults('stock')
    assert applied == 'None'
    if stock < 12 * 16384 // 2:  # e.g. transparent huge pages for every allocation
        pytest.skip(f'stock glibc faulted only {stock} pages here: nothing to remove')
    assert stock >= 11 * 16384  # every tensor faulted in again (measured: 12 x 16384 + 12)
    applied, reuse = _faults('reuse')
    assert applied == 'True'
    assert reuse < 1024, (stock, reuse)  # measured: 0


@pytest.mark.parametrize('mode, cuda, expected', [
    ('auto', False, 'reuse'), ('auto', True, 'stock'), ('reuse', True, 'reuse'),
    ('stock', False, 'stock')])
def test_auto_reuses_only_without_cuda(mode, cuda, expected):
    assert malloc.resolve_mode(mode, cuda) == expected


def test_a_typo_names_the_key_and_the_choices():
    with pytest.raises(ValueError, match=r"env_cfg.cpu_malloc='reuze'.*'auto', 'reuse', 'stock'"):
        malloc.apply_cpu_malloc('reuze', cuda=False)


def test_launcher_applies_the_config_key_and_logs_one_line(monkeypatch):
    calls = []
    monkeypatch.setattr(malloc, 'reuse_freed_memory', lambda: calls.append(1) or True)
    assert malloc.apply_cpu_malloc('stock', cuda=False) is None and not calls
    line = malloc.apply_cpu_malloc('auto', cuda=False)
    assert calls == [1] and "cpu_malloc='auto'" in line and "'stock'" in line
    monkeypatch.setattr(malloc, 'reuse_freed_memory', lambda: False)
    assert 'not applied' in malloc.apply_cpu_malloc('reuse', cuda=True)
