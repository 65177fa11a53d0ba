"""Stands in for ``mmaction.models.localizers.drn``, which mmaction2 1.2.0's wheel and sdist
leave out (an upstream packaging bug) although ``mmaction.models.localizers`` imports
``DRN`` from it. peco_mm's start-up hook (``peco_mm/ops/ext_finder.py``) serves this package
only where mmaction2 has none, so that ``import mmaction.models`` works; the video-grounding
model DRN itself is not provided."""
