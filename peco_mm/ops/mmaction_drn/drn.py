"""``DRN`` for ``from .drn.drn import DRN`` in ``mmaction.models.localizers``: building it
raises an error that says why (see this package's docstring)."""


class DRN:
    """mmaction2's Dense Regression Network for video grounding, absent from its 1.2.0
    wheel; building it raises ``NotImplementedError``."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            "mmaction2 1.2.0's wheel lacks mmaction/models/localizers/drn/, so its DRN "
            'video-grounding model is not available; install mmaction2 from its git sources '
            'to use it')
