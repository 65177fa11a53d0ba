"""Optimizer wrappers that skip a step whose loss is NaN/inf: the guard of `NonFiniteLossHook`.

The check sits where every model's `train_step` hands its loss over: the optimizer wrapper's
`update_params`. `NonFiniteGuard` is a mixin for any mmengine optimizer wrapper; `guarded()`
gives (and registers) its subclass of a wrapper class, e.g. `NonFiniteGuardAmpOptimWrapper`,
and `guard_optim_wrapper_cfg` puts them in a config's `optim_wrapper` (one wrapper, or each of
a dict of them). A skipped step runs no backward and no optimizer step and zeroes the
gradients; it is counted in `nonfinite_steps`, which the hook reads after the iteration to
stop the run, or to log the skip, with the loss terms the model returned.
"""
from __future__ import annotations

import torch
from mmengine import dist
from mmengine.optim import AmpOptimWrapper, OptimWrapper

from ...registry import OPTIM_WRAPPERS
from .autocast import AutocastOptimWrapper
from .layer_decay import BaseGroupLrFirst

PREFIX = 'NonFiniteGuard'


def all_finite(loss: torch.Tensor) -> bool:
    """Whether the loss is finite on every rank (one device sync per step)."""
    flag = torch.isfinite(loss.detach()).all().float()
    dist.all_reduce(flag, op='min')  # mmengine.dist: a no-op in one process
    return bool(flag)


class NonFiniteGuard:
    """Mixin: `update_params` skips the step when the loss is not finite on some rank."""

    nonfinite_steps = 0  # skipped since the hook last looked

    def update_params(self, loss: torch.Tensor, *args, **kwargs) -> None:
        if all_finite(loss):
            return super().update_params(loss, *args, **kwargs)
        self.zero_grad()
        self.nonfinite_steps += 1

    def pop_nonfinite_steps(self) -> int:
        n, self.nonfinite_steps = self.nonfinite_steps, 0
        return n


def guarded(base: type) -> type:
    """The registered `NonFiniteGuard<base>` subclass of an optimizer wrapper class (which
    also logs the base group's lr as `lr`: `BaseGroupLrFirst`)."""
    if issubclass(base, NonFiniteGuard):
        return base
    name = PREFIX + base.__name__
    cls = OPTIM_WRAPPERS.get(name)
    if cls is None:
        cls = type(name, (NonFiniteGuard, BaseGroupLrFirst, base), dict(
            __module__=__name__, __doc__=f'`{base.__name__}` whose steps with a non-finite '
            'loss are skipped (see `NonFiniteGuard`).'))
        OPTIM_WRAPPERS.register_module(name=name, module=cls)
    return cls


for _base in (OptimWrapper, AmpOptimWrapper, AutocastOptimWrapper):
    guarded(_base)  # registered on import, so a dumped config builds with them


def guard_optim_wrapper_cfg(ow) -> None:
    """Put the guarded class in place of each wrapper type of an `optim_wrapper` config (in
    place): a single wrapper (`type` defaults to OptimWrapper), or the wrappers of an
    `OptimWrapperDict` (sub-dicts with an `optimizer`). Built wrappers are left alone."""
    if not isinstance(ow, dict):
        return
    subs = [v for v in ow.values() if isinstance(v, dict) and 'optimizer' in v]
    for cfg in subs if subs and 'optimizer' not in ow else [ow]:
        base = cfg.get('type', 'OptimWrapper')
        cls = base if isinstance(base, type) else OPTIM_WRAPPERS.get(str(base))
        if cls is not None:
            cfg['type'] = guarded(cls).__name__
