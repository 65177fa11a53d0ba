"""Serve modules an install lacks from peco_mm/ops/: peco_mm's torchvision-backed ops as
``mmcv._ext`` when mmcv ships none (mmcv-lite), and ``mmaction.models.localizers.drn``, which
mmaction2 1.2.0's wheel and sdist leave out although ``mmaction.models`` imports it.

Standard library only. ``import peco_mm`` calls :func:`install` first thing, so a config
whose ``custom_imports`` name peco_mm (every PeCo config) and every PeCo tool get the ops,
also from a checkout on PYTHONPATH that was never pip-installed. For stock OpenMMLab configs
that never import peco_mm, the ``peco_mm_mmcv_ext.pth`` start-up hook that installing peco_mm
puts in site-packages runs this file at interpreter start-up and calls :func:`install`
(``PECO_MM_STARTUP_HOOK=0`` turns the hook off). Without either, mmcv-lite's ``import
mmcv.ops`` fails with ``No module named 'mmcv._ext'``.

The finder is appended to the end of ``sys.meta_path``, so it is only asked for a name after
every regular finder failed to find it: where mmcv's compiled ops are installed
(``mmcv/_ext.*.so``), or an mmaction2 that ships ``drn/``, those are imported and this finder
never runs.
"""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXT_NAME = 'mmcv._ext'
SHIM_FILE = os.path.join(HERE, 'mmcv_ext.py')
DRN_NAME = 'mmaction.models.localizers.drn'
DRN_DIR = os.path.join(HERE, 'mmaction_drn')
# module name -> (file, package folder or None)
SERVED = {
    EXT_NAME: (SHIM_FILE, None),
    DRN_NAME: (os.path.join(DRN_DIR, '__init__.py'), DRN_DIR),
}


class MMCVExtFinder:
    """Meta-path finder answering only the names in ``SERVED`` (``mmcv._ext`` and mmaction2's
    missing ``drn`` package), with the files in this folder."""

    # marks our finder in sys.meta_path, also when this file was loaded twice (start-up
    # hook, then `import peco_mm.ops`), so install() adds one finder only
    is_peco_mm_mmcv_ext_finder = True

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in SERVED:
            return None
        file, package_dir = SERVED[fullname]
        locations = [package_dir] if package_dir else None
        return importlib.util.spec_from_file_location(fullname, file,
                                                      submodule_search_locations=locations)


def install() -> None:
    """Append the finder to ``sys.meta_path`` (once)."""
    if not any(getattr(f, 'is_peco_mm_mmcv_ext_finder', False) for f in sys.meta_path):
        sys.meta_path.append(MMCVExtFinder())
