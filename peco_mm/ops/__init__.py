"""mmcv ops without mmcv's C++ build: ``mmcv_ext.py`` is a torchvision-backed ``mmcv._ext``
and ``ext_finder.py`` serves it wherever mmcv has no compiled one (mmcv-lite)."""
from .ext_finder import MMCVExtFinder, install

__all__ = ['MMCVExtFinder', 'install']
