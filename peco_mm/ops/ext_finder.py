"""Serve peco_mm's torchvision-backed ops as ``mmcv._ext`` when mmcv ships none (mmcv-lite).

Standard library only, and loaded at interpreter start-up without importing peco_mm: the
``peco_mm_mmcv_ext.pth`` file that installing peco_mm puts in site-packages runs this file and
calls :func:`install`. The finder is appended to the end of ``sys.meta_path``, so it is only
asked for ``mmcv._ext`` after every regular finder failed to find it: where mmcv's compiled ops
are installed (``mmcv/_ext.*.so``), they are imported and this finder never runs.
"""
import importlib.util
import os
import sys

EXT_NAME = 'mmcv._ext'
SHIM_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'mmcv_ext.py')


class MMCVExtFinder:
    """Meta-path finder answering only ``mmcv._ext``, with the module in ``mmcv_ext.py``."""

    # marks our finder in sys.meta_path, also when this file was loaded twice (start-up
    # hook, then `import peco_mm.ops`), so install() adds one finder only
    is_peco_mm_mmcv_ext_finder = True

    def find_spec(self, fullname, path=None, target=None):
        if fullname != EXT_NAME:
            return None
        return importlib.util.spec_from_file_location(EXT_NAME, SHIM_FILE)


def install() -> None:
    """Append the finder to ``sys.meta_path`` (once)."""
    if not any(getattr(f, 'is_peco_mm_mmcv_ext_finder', False) for f in sys.meta_path):
        sys.meta_path.append(MMCVExtFinder())
