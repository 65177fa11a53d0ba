"""mmaction2 1.2.0's wheel lacks mmaction/models/localizers/drn/: peco_mm's start-up hook serves
a stand-in, so `import mmaction.models` works; and `import peco_mm` leaves mmaction alone."""
import pytest

from tests.ops.test_mmcv_ext import run_python

from peco_mm.ops import ext_finder


def test_mmaction_models_import_through_the_drn_stand_in(tmp_path):
    code = ("import mmaction.models, mmaction.models.localizers.drn.drn as drn; "
            "from mmaction.registry import MODELS; "
            "print(drn.__file__, MODELS.get('Recognizer3D').__name__)")
    origin, name = run_python(code, tmp_path, []).split()
    assert origin == f'{ext_finder.DRN_DIR}/drn.py' and name == 'Recognizer3D'


def test_drn_stand_in_says_what_is_missing():
    from peco_mm.ops.mmaction_drn.drn import DRN
    with pytest.raises(NotImplementedError, match='lacks mmaction/models/localizers/drn/'):
        DRN()


def test_import_peco_mm_does_not_import_mmaction(tmp_path):
    code = "import sys, peco_mm; print(sorted(m for m in sys.modules if m.startswith('mmaction')))"
    assert run_python(code, tmp_path, []) == '[]'
