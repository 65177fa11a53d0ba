"""peco_mm's torchvision-backed ``mmcv._ext`` against mmcv 2.1.0's compiled ops, and the start-up
hook that serves it.

The parity cases and mmcv's outputs were recorded once from the compiled mmcv 2.1.0 (CPU) by
tools/record_mmcv_ops_fixture.py (see its docstring for the cases). Here the same mmcv.ops
Python code runs on the shim, and every output must be bit-identical: RoIAlign outputs and
input gradients with torch.equal, nms / batched_nms keep indices and kept (box, score) rows.
"""
import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT

from peco_mm.ops import ext_finder, mmcv_ext

FIXTURE = ROOT / 'tests' / 'ops' / 'data' / 'mmcv_ops_2.1.0.pt'
PTH = ROOT / 'peco_mm' / 'ops' / 'peco_mm_mmcv_ext.pth'


def load_recorder():
    spec = importlib.util.spec_from_file_location(
        'record_mmcv_ops_fixture', ROOT / 'tools' / 'record_mmcv_ops_fixture.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RECORDED = torch.load(FIXTURE, weights_only=True)
CASES = RECORDED['cases']


def case_id(case):
    params = {k: v for k, v in case.items() if not isinstance(v, torch.Tensor)}
    params.pop('expected')
    return '-'.join(f'{v}' for v in params.values()).replace(' ', '')


def test_fixture_is_from_compiled_mmcv_2_1_0():
    meta = RECORDED['meta']
    assert meta['mmcv'] == '2.1.0' and meta['ext'].endswith('.so'), meta
    ops = {case['op'] for case in CASES}
    assert ops == {'roi_align', 'nms', 'batched_nms'}
    assert {(c['aligned'], c['sampling_ratio']) for c in CASES if c['op'] == 'roi_align'} == {
        (True, 0), (True, 2), (False, 0), (False, 2)}
    assert any(c['op'] == 'roi_align' and len(c['rois']) == 0 for c in CASES)
    assert FIXTURE.stat().st_size < 200_000


@pytest.mark.parametrize('case', CASES, ids=[case_id(c) for c in CASES])
def test_shim_matches_compiled_mmcv(case, monkeypatch):
    # the modules, not the functions mmcv.ops exports under the same names
    for name in ('mmcv.ops.roi_align', 'mmcv.ops.nms'):
        monkeypatch.setattr(importlib.import_module(name), 'ext_module', mmcv_ext)
    got = load_recorder().run_case(case)
    expected = case['expected']
    assert got.keys() == expected.keys()
    for key in expected:
        assert got[key].dtype == expected[key].dtype, key
        assert torch.equal(got[key], expected[key]), (
            key, (got[key].float() - expected[key].float()).abs().max()
            if got[key].shape == expected[key].shape else (got[key].shape, expected[key].shape))
    if case['op'] == 'roi_align' and len(case['rois']):
        assert expected['grad'].abs().sum() > 0 and expected['out'].abs().sum() > 0


def test_other_ops_raise_one_line_error_naming_op_and_full_build():
    with pytest.raises(NotImplementedError) as err:
        mmcv_ext.modulated_deform_conv_forward(torch.zeros(1))
    msg = str(err.value)
    assert "'modulated_deform_conv_forward'" in msg and 'tools/install.sh --mmcv-ops' in msg
    assert '\n' not in msg
    assert not hasattr(mmcv_ext, '__path__')  # not taken for a package
    out = torch.zeros(1, 1, 2, 2)
    with pytest.raises(NotImplementedError, match="pool_mode='max'"):
        mmcv_ext.roi_align_forward(torch.zeros(1, 1, 4, 4), torch.zeros(1, 5), out, out, out,
                                   aligned_height=2, aligned_width=2, spatial_scale=1.,
                                   sampling_ratio=0, pool_mode=0, aligned=True)


def run_python(code, tmp_path, pythonpath, flags=()):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, pythonpath)), OMP_NUM_THREADS='1')
    proc = subprocess.run([sys.executable, *flags, '-c', code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


# What site.py does with the start-up hook's one line, then where `import mmcv._ext` would
# load from (finding it does not load it, nor torch)
RUN_PTH = (f"exec(open({str(PTH)!r}).read()); import importlib.util; "
           "print(importlib.util.find_spec('mmcv._ext').origin)")


def test_startup_hook_serves_shim_where_mmcv_has_no_ext(tmp_path):
    (tmp_path / 'mmcv').mkdir()  # an mmcv without _ext, as mmcv-lite
    (tmp_path / 'mmcv' / '__init__.py').write_text('')
    assert run_python(RUN_PTH, tmp_path, [tmp_path, ROOT]) == ext_finder.SHIM_FILE


def test_startup_hook_steps_aside_for_compiled_ext(tmp_path):
    (tmp_path / 'mmcv').mkdir()
    (tmp_path / 'mmcv' / '__init__.py').write_text('')
    (tmp_path / 'mmcv' / '_ext.py').write_text('')  # stands for _ext.cpython-*.so
    assert run_python(RUN_PTH, tmp_path, [tmp_path, ROOT]) == str(tmp_path / 'mmcv' / '_ext.py')


def test_startup_hook_is_quiet_without_peco_mm(tmp_path, monkeypatch):
    # a venv whose peco_mm was removed: nothing happens. -S leaves out site-packages (where this
    # venv's editable peco_mm would be found), so only tmp_path is searched
    code = f"exec(open({str(PTH)!r}).read()); import sys; print(len(sys.meta_path))"
    bare = run_python('import sys; print(len(sys.meta_path))', tmp_path, [tmp_path], ['-S'])
    assert run_python(code, tmp_path, [tmp_path], ['-S']) == bare
    # and with peco_mm importable, the hook adds its finder, unless turned off
    assert int(run_python(code, tmp_path, [ROOT], ['-S'])) == int(bare) + 1
    monkeypatch.setenv('PECO_MM_STARTUP_HOOK', '0')
    assert run_python(code, tmp_path, [ROOT], ['-S']) == bare


def test_hosts_import_and_run_on_the_shim(tmp_path):
    # mmcv.ops checks all its ~110 op names at import; mmdet and mmseg import mmcv.ops.
    # The RoI (0, 0)-(3, 3) shifted by -0.5 (aligned) samples 4 * y + x at y, x in
    # {0.25, 1.75}: their mean is 5.
    code = (f"import importlib.util, sys; spec = importlib.util.spec_from_file_location("
            f"'mmcv._ext', {ext_finder.SHIM_FILE!r}); ext = importlib.util.module_from_spec(spec); "
            "sys.modules['mmcv._ext'] = ext; spec.loader.exec_module(ext); "
            "import mmdet.models, mmseg.models, mmcv.ops, torch; "
            "from mmengine.utils.dl_utils import mmcv_full_available; "
            "x = torch.arange(16.).view(1, 1, 4, 4); "
            "r = torch.tensor([[0., 0., 0., 3., 3.]]); "
            "print(mmcv.ops.__name__, mmcv_full_available(), "
            "mmcv.ops.RoIAlign((1, 1), 1., 2)(x, r).item())")
    assert run_python(code, tmp_path, [ROOT]) == 'mmcv.ops True 5.0'


# In a process without the start-up hook (python -S: site-packages on PYTHONPATH, its .pth
# files not run) and peco_mm not imported, mmcv-lite has no mmcv._ext; a dense config, whose
# custom_imports import peco_mm, then builds and trains one step (RoIAlign and nms in Mask
# R-CNN), although mmcv.ops failed to import once before
DENSE_STEPS = """
import sys
import torch
assert not any(getattr(f, 'is_peco_mm_mmcv_ext_finder', False) for f in sys.meta_path)
try:
    import mmcv.ops  # noqa: F401
    before = 'mmcv._ext found'
except ModuleNotFoundError as err:
    before = str(err)
from mmengine.config import Config
results = [before]
for path in sys.argv[1:]:
    cfg = Config.fromfile(path)
    from peco_mm.tooling.config_step import train_step
    step, _ = train_step(cfg, batch=1, device='cpu', amp='none')
    losses = step()
    results.append(all(bool(torch.isfinite(v).all()) for v in losses.values()))
print(results)
"""


def test_dense_configs_run_without_the_startup_hook(tmp_path):
    import site
    script = tmp_path / 'dense_steps.py'
    script.write_text(DENSE_STEPS)
    configs = [ROOT / 'configs/demo' / f'{name}_tiny_shapes.py'
               for name in ('mask_rcnn', 'upernet')]
    env = dict(os.environ, OMP_NUM_THREADS='1',
               PYTHONPATH=os.pathsep.join([str(ROOT), *site.getsitepackages()]))
    proc = subprocess.run([sys.executable, '-S', str(script), *map(str, configs)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == str(
        ["No module named 'mmcv._ext'", True, True])


def test_the_wheel_holds_the_hook_and_the_tool_installs_it_beside_an_editable_install(tmp_path):
    # the wheels `pip install .` and `pip install -e .` install, built from a copy of the
    # packaging files: the hook at the root of the first (i.e. in site-packages); the editable
    # wheel holds only the path to the package folders, and tools/install_startup_hook.py
    # (which `make install` runs after it) puts the hook in place and takes it out
    import shutil
    import zipfile
    src = tmp_path / 'src'
    shutil.copytree(ROOT / 'peco_mm', src / 'peco_mm',
                    ignore=shutil.ignore_patterns('__pycache__'))
    for name in ('setup.py', 'setup.cfg', 'pyproject.toml', 'README.md'):
        shutil.copy(ROOT / name, src / name)
    out = tmp_path / 'wheels'
    wheels = []
    for hook in ('build_wheel', 'build_editable'):  # one process each, as pip runs them
        code = f'import sys, setuptools.build_meta as b; print(b.{hook}(sys.argv[1]))'
        proc = subprocess.run([sys.executable, '-c', code, str(out)], cwd=src,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        wheels.append(proc.stdout.split()[-1])
    assert 'editable' not in wheels[0] and 'editable' in wheels[1], wheels
    with zipfile.ZipFile(out / wheels[0]) as zf:
        assert zf.read('peco_mm_mmcv_ext.pth').decode() == PTH.read_text()
        assert 'peco_mm/py.typed' in zf.namelist()  # PEP 561 marker, with the package
    with zipfile.ZipFile(out / wheels[1]) as zf:
        assert 'peco_mm_mmcv_ext.pth' not in zf.namelist()
    site = tmp_path / 'site'
    site.mkdir()
    tool = [sys.executable, str(ROOT / 'tools' / 'install_startup_hook.py'), '--site', str(site)]
    subprocess.run(tool, check=True, capture_output=True)
    assert (site / 'peco_mm_mmcv_ext.pth').read_text() == PTH.read_text()
    subprocess.run(tool + ['--remove'], check=True, capture_output=True)
    assert not (site / 'peco_mm_mmcv_ext.pth').exists()
    proc = subprocess.run(tool[:-1] + [str(tmp_path / 'none')], capture_output=True, text=True)
    assert proc.returncode == 1 and f'--site {tmp_path / "none"} is not a folder' in proc.stderr
    # `make install` ran it for the project's own venv
    import sysconfig
    assert (Path(sysconfig.get_paths()['purelib']) / 'peco_mm_mmcv_ext.pth').read_text() == \
        PTH.read_text()
