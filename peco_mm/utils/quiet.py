"""Quieter for a while: mmengine's current logger held at WARNING (model init, optimizer
tables); setuptools' deprecation warning for `pkg_resources`, which mmengine imports."""
from __future__ import annotations

import contextlib
import logging
import warnings


@contextlib.contextmanager
def quiet_logs():
    """Inside: the current MMLogger logs warnings and errors only (no line per initialised
    parameter); its level is restored afterwards."""
    from mmengine.logging import MMLogger
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def quiet_pkg_resources():
    """Inside: setuptools' `pkg_resources is deprecated` UserWarning is not shown. mmengine
    0.10.x imports `pkg_resources` on first use (e.g. `Config.fromfile` resolving an
    `mmpretrain::` base); the warning names nothing a user can act on. Every other warning
    still shows, and the filter is restored on leaving."""
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='pkg_resources is deprecated',
                                category=UserWarning)
        yield
