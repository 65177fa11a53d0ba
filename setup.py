"""Packaging; the metadata and dependencies are in setup.cfg.

This file only adds the start-up hook ``peco_mm_mmcv_ext.pth`` (peco_mm/ops/) to the root of
the wheel, i.e. to site-packages, for ``pip install .`` and ``pip install -e .`` alike.
``import peco_mm`` serves peco_mm's torchvision-backed mmcv ops (and the module mmaction2's
wheel lacks) by itself; the hook is for stock OpenMMLab configs that never import peco_mm: it
lets their ``import mmcv.ops`` find the ops in an mmcv-lite environment, whatever is imported
first (see peco_mm/ops/ext_finder.py; ``PECO_MM_STARTUP_HOOK=0`` turns it off).
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = 'peco_mm_mmcv_ext.pth'
PTH_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'peco_mm', 'ops', PTH)


class BuildPyWithHook(build_py):
    """``pip install .``: whatever lies at the root of build_lib lands in site-packages."""

    def run(self):
        super().run()
        if not self.editable_mode:
            self.copy_file(PTH_SRC, os.path.join(self.build_lib, PTH))


class EditableWheelWithHook(editable_wheel):
    """``pip install -e .``: the editable wheel is written from this unpacked folder (and the
    packages are served from the checkout). setuptools 77 to 80 (pyproject.toml) have this
    method."""

    def _run_build_commands(self, dist_name, unpacked_wheel, build_lib, tmp_dir):
        outputs = super()._run_build_commands(dist_name, unpacked_wheel, build_lib, tmp_dir)
        shutil.copyfile(PTH_SRC, os.path.join(unpacked_wheel, PTH))
        return outputs


setup(cmdclass=dict(build_py=BuildPyWithHook, editable_wheel=EditableWheelWithHook))
