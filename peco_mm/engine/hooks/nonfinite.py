"""Stop (or skip the step) at a non-finite loss, in any stage.

Without it, a diverging run keeps training at `loss: nan  grad_norm: nan`, writes NaN
checkpoints and evaluates to NaN scores. The check sits at the optimizer wrapper, before
backward: the launcher puts the guarded subclass of every optimizer wrapper in the config
(`peco_mm.engine.optimizers.nonfinite_guard`), which skips a step whose loss is not finite.
After the iteration, this hook stops the run there, naming the loss terms the model returned,
or logs the skip (up to `max_skips`). That covers tokenizer training, PeCo / PeCo_MAE
pretraining, classification, UperNet and Mask R-CNN without code in any model (no model has a
check of its own, so `max_skips` holds everywhere).

Before the first step it also refuses a model whose weights are already NaN/inf, naming the
tensors and the files they were loaded from (`load_from`, `init_cfg` checkpoints).
"""
from __future__ import annotations

import math

import torch
from mmengine.hooks import Hook
from mmengine.optim import OptimWrapperDict
from mmengine.runner import EpochBasedTrainLoop

from ..optimizers.nonfinite_guard import NonFiniteGuard
from ...registry import HOOKS

ADVICE = ('Try a lower learning rate (optim_wrapper.optimizer.lr) or gradient clipping '
          '(optim_wrapper.clip_grad=dict(max_norm=...)); check the data '
          '(tools/check_dataset.py CONFIG); with fp16 mixed precision use bf16 or fp32.')


@HOOKS.register_module()
class NonFiniteLossHook(Hook):
    """Raise FloatingPointError at the first non-finite loss, or skip up to `max_skips`
    steps (no backward, no optimizer step, gradients zeroed) and raise at the next one.

    Args:
        max_skips: how many steps with a non-finite loss to skip in the whole run before
            stopping; 0 (default) stops at the first.

    tools/train.py adds it to every run; set `nonfinite_loss = dict(max_skips=N)` in a config
    to skip instead. Under DDP all ranks agree (one all-reduce of a flag per step), so they
    skip or stop together.
    """
    priority = 'VERY_HIGH'

    def __init__(self, max_skips: int = 0) -> None:
        if not isinstance(max_skips, int) or max_skips < 0:
            raise ValueError(f'NonFiniteLossHook: max_skips={max_skips!r}; allowed: an int >= 0')
        self.max_skips = max_skips
        self.skipped = 0
        self.wrappers: list = []

    def before_train(self, runner) -> None:
        check_loaded_weights(runner)
        self.wrappers = optim_wrappers(runner)
        unguarded = [type(w).__name__ for w in self.wrappers if not isinstance(w, NonFiniteGuard)]
        if unguarded:
            runner.logger.warning(
                f'NonFiniteLossHook: the optimizer wrapper(s) {", ".join(unguarded)} do not '
                'skip non-finite steps; tools/train.py puts their NonFiniteGuard subclass in '
                'the config (peco_mm.engine.optimizers.guard_optim_wrapper_cfg)')

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if not sum(w.pop_nonfinite_steps() for w in self.wrappers
                   if isinstance(w, NonFiniteGuard)):
            return
        message = self.describe(runner, outputs)
        if self.skipped >= self.max_skips:
            runner.logger.error(message)
            raise FloatingPointError(message)
        self.skipped += 1
        runner.logger.warning(f'{message.split(". Try")[0]}; step skipped '
                              f'({self.skipped} of max_skips={self.max_skips}).')

    def describe(self, runner, terms: dict | None) -> str:
        """One line: where, which terms, what to try."""
        values = {k: float(v.detach().float().mean()) if torch.is_tensor(v) else v
                  for k, v in (terms or {}).items()}
        bad = [k for k, v in values.items()
               if k != 'loss' and isinstance(v, float) and not math.isfinite(v)] or ['loss']
        shown = ', '.join(f'{k}={v:.4g}' for k, v in values.items()
                          if isinstance(v, float))
        where = f'iteration {runner.iter + 1}'
        if isinstance(runner.train_loop, EpochBasedTrainLoop):
            where += f' (epoch {runner.epoch + 1})'
        return (f'Non-finite loss at {where} in {", ".join(bad)} ({shown}). {ADVICE} To skip '
                'such steps instead of stopping: nonfinite_loss = dict(max_skips=N).')


def optim_wrappers(runner) -> list:
    wrappers = runner.optim_wrapper
    return list(wrappers.values()) if isinstance(wrappers, OptimWrapperDict) else [wrappers]


def check_loaded_weights(runner) -> None:
    """Raise FloatingPointError naming the tensors when the model holds NaN/inf before the
    first step: weights loaded that way (`load_from`, an `init_cfg` checkpoint) would only
    train to NaN, or silently not train the layers they poison."""
    from .checkpoint import nonfinite_tensors
    bad = nonfinite_tensors(runner.model)
    if not bad:
        return
    sources = weight_sources(runner.cfg)
    shown = ', '.join(bad[:5]) + (' ...' if len(bad) > 5 else '')
    raise FloatingPointError(
        f'the model holds NaN/inf before training starts: {len(bad)} tensors ({shown}). '
        + (f'They were loaded from {", ".join(sources)}; ' if sources else '')
        + 'use a checkpoint with finite weights (check it with torch.isfinite).')


def weight_sources(cfg) -> list[str]:
    """'load_from=PATH' and 'KEY.checkpoint=PATH' for every weights file a config loads."""
    out = [f'load_from={cfg.load_from}'] if cfg.get('load_from') else []

    def walk(node, key):
        if isinstance(node, dict):
            if node.get('type') == 'Pretrained' and node.get('checkpoint'):
                out.append(f"{key}.checkpoint={node['checkpoint']}")
            if key.endswith('target_generator') and node.get('checkpoint'):
                out.append(f"{key}.checkpoint={node['checkpoint']}")
            for k, v in node.items():
                walk(v, f'{key}.{k}')
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, f'{key}.{i}')
    walk(cfg.get('model'), 'model')
    return out
