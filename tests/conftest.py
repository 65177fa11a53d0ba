"""Shared test helpers: synthetic image folders, running the tools in a subprocess, and reading
what a run wrote."""
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from peco_mm.tooling.demo_data import make_class_folder

ROOT = Path(__file__).resolve().parents[1]


def _cache_host_config_index() -> None:
    """mmengine reads every model-index YAML file of mmpretrain (about 0.25 s) each time a
    config names a base as `mmpretrain::...`, and the suite parses hundreds of configs. The
    files are installed ones, which do not change while the tests run, so their reading is
    cached for the test session (in this process; the tools the tests start are unchanged)."""
    import functools

    from mmengine.config import utils
    read = getattr(utils, 'load', None)
    if read is None or hasattr(read, 'cached'):
        return
    cached = functools.lru_cache(maxsize=None)(read)

    def load(file, *args, **kwargs):
        if isinstance(file, str) and file.endswith('.yml') and not args and not kwargs:
            return cached(file)
        return read(file, *args, **kwargs)
    load.cached = cached
    utils.load = load


_cache_host_config_index()


def _one_core_per_worker() -> None:
    """Under pytest-xdist each worker gets its share of the cores for torch's intra-op threads
    (by default each would use them all, and two workers on two cores would oversubscribe
    them: in-process training runs then wait on each other's threads)."""
    import torch
    workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '0') or 0)
    if workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


_one_core_per_worker()


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


def randomize(model, seed: int):
    """A model with random weights everywhere (tables, tokens, gammas too; LayerNorm weights
    near 1), in eval mode: weight conversions and exports are compared on weights that no
    initialisation scheme could make agree by chance."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.2 * torch.randn(p.shape, generator=g))
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.add_(1.0)
    model.eval()  # some hosts override train() without returning self
    return model


def load_tool(name: str):
    """tools/<name>.py imported as a module (the tools are scripts, not a package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, ROOT / 'tools' / f'{name}.py')
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def scalars(work_dir) -> list[dict]:
    """The records mmengine wrote to <work_dir>/<timestamp>/vis_data/scalars.json (newest)."""
    files = sorted(Path(work_dir).glob('*/vis_data/scalars.json'))
    assert files, f'no */vis_data/scalars.json under {work_dir}'
    return [json.loads(line) for line in files[-1].read_text().splitlines() if line.strip()]


def run_log(work_dir) -> str:
    """The text of the newest <work_dir>/<timestamp>/<timestamp>.log."""
    return sorted(Path(work_dir).glob('*/*.log'))[-1].read_text()


@contextlib.contextmanager
def mmengine_instances_dropped():
    """Runs inside the test process leave mmengine's global instances (scope, visualizer,
    message hub, loggers with open log files) behind; drop the ones made inside the block, so
    later runs neither see them nor write each log line to every earlier run's file."""
    from mmengine.utils import ManagerMixin

    def kinds(cls=ManagerMixin):  # every subclass keeps its own instances (UniversalVisualizer...)
        for sub in cls.__subclasses__():
            yield sub
            yield from kinds(sub)

    before = {k: set(k._instance_dict) for k in kinds()}
    try:
        yield
    finally:
        for k in kinds():
            for name in set(k._instance_dict) - before.get(k, set()):
                inst = k._instance_dict.pop(name)
                for h in getattr(inst, 'handlers', [])[:]:  # the loggers' open log files
                    h.close()
                    inst.removeHandler(h)


@pytest.fixture
def image_folder(tmp_path):
    make_class_folder(tmp_path / 'data' / 'train')
    make_class_folder(tmp_path / 'data' / 'val', seed=1, per_class=4)
    return tmp_path / 'data'


@pytest.fixture(autouse=True)
def _default_scope_as_before():
    """Each test leaves mmengine's default scope as it found it. A Runner or an
    `init_default_scope` inside a test makes its scope the current one for every later test of
    the same process, and a host registry then builds in that scope (`ResizeEdge is not in the
    mmengine::transform registry`): which test ran before would decide whether one passes."""
    from mmengine.registry import DefaultScope
    before = list(DefaultScope._instance_dict.items())
    yield
    DefaultScope._instance_dict.clear()
    DefaultScope._instance_dict.update(before)
