"""mmaction2 1.2.0's wheel lacks mmaction/models/localizers/drn/: peco_mm's start-up hook serves
a stand-in, so `import mmaction.models` works; and `import peco_mm` leaves mmaction alone."""
import os
import subprocess
import sys

import pytest

from peco_mm.ops import ext_finder


def test_mmaction_models_import_through_the_drn_stand_in(tmp_path):
    # `import peco_mm` leaves mmaction alone (lazy hosts); then mmaction.models imports
    code = ("import sys, peco_mm; "
            "print(sorted(m for m in sys.modules if m.startswith('mmaction'))); "
            "import mmaction.models, mmaction.models.localizers.drn.drn as drn; "
            "from mmaction.registry import MODELS; "
            "print(drn.__file__, MODELS.get('Recognizer3D').__name__)")
    out = run_python_lines(code, tmp_path)
    assert out[-2] == '[]'
    origin, name = out[-1].split()
    assert origin == f'{ext_finder.DRN_DIR}/drn.py' and name == 'Recognizer3D'


def run_python_lines(code, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS='1')
    proc = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()


def test_drn_stand_in_says_what_is_missing():
    from peco_mm.ops.mmaction_drn.drn import DRN
    with pytest.raises(NotImplementedError, match='lacks mmaction/models/localizers/drn/'):
        DRN()
