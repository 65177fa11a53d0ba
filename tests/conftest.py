"""Shared test helpers: synthetic image folders and running the tools in a subprocess."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def make_class_images(root: Path, classes=('red', 'green', 'blue'), per_class: int = 6,
                      size: int = 32, seed: int = 0) -> Path:
    """ImageNet-style folder root/<class>/*.png; class c is a noisy image dominated by channel
    c with a bright square at a class-specific place, so a tiny model can learn it."""
    rng = np.random.default_rng(seed)
    for c, name in enumerate(classes):
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            img = rng.integers(0, 80, (size, size, 3)).astype(np.uint8)
            img[..., c % 3] += 120
            o = (c * size // (len(classes) + 1)) % (size - 8)
            img[o:o + 8, o:o + 8] = 250
            Image.fromarray(img).save(d / f'{i}.png')
    return root


def run_tool(args, cwd=ROOT, timeout=600, env=None, check=True):
    """Run a tools/ script (or any argv) with the project's python; return CompletedProcess."""
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1', PYTHON=sys.executable)
    full_env.update(env or {})
    if str(args[0]).endswith('.py'):
        args = [sys.executable, *map(str, args)]
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=full_env, timeout=timeout,
                          capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f'{args} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n'
                             f'{proc.stderr[-6000:]}')
    return proc


@pytest.fixture
def image_folder(tmp_path):
    make_class_images(tmp_path / 'data' / 'train')
    make_class_images(tmp_path / 'data' / 'val', seed=1, per_class=4)
    return tmp_path / 'data'
