"""mmengine's current logger held at WARNING for a while (model init, optimizer tables)."""
from __future__ import annotations

import contextlib
import logging


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
