"""Packaging; the metadata and dependencies are in setup.cfg.

This file only adds the start-up hook ``peco_mm_mmcv_ext.pth`` (peco_mm/ops/) to the root of
the wheel ``pip install .`` builds, i.e. to site-packages. ``import peco_mm`` serves peco_mm's
torchvision-backed mmcv ops (and the module mmaction2's wheel lacks) by itself; the hook is for
stock OpenMMLab configs that never import peco_mm: it lets their ``import mmcv.ops`` find the
ops in an mmcv-lite environment, whatever is imported first (see peco_mm/ops/ext_finder.py;
``PECO_MM_STARTUP_HOOK=0`` turns it off). An editable wheel holds only the path to the package
folders (setuptools' documented behaviour for build sub-commands in editable mode), so after
``pip install -e .`` the hook is put in place by ``python tools/install_startup_hook.py``,
which ``make install`` runs.
"""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = 'peco_mm_mmcv_ext.pth'
PTH_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'peco_mm', 'ops', PTH)


class BuildPyWithHook(build_py):
    """``pip install .``: whatever lies at the root of build_lib lands in site-packages. Only
    the public parts of a build sub-command (``run``, ``get_outputs``, ``build_lib``,
    ``editable_mode``)."""

    def run(self):
        super().run()
        if not self.editable_mode:
            self.copy_file(PTH_SRC, os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode=True):
        hook = [] if self.editable_mode else [os.path.join(self.build_lib, PTH)]
        return super().get_outputs(include_bytecode) + hook


setup(cmdclass=dict(build_py=BuildPyWithHook))
