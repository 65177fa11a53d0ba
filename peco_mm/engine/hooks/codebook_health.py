"""Codebook health during tokenizer training: a dead codebook (thousands of the 8192 codes never
chosen) is the failure people meet most when training their own tokenizers, so it is measured
and logged, not hoped for.

Every `interval` iterations the hook reads the quantizer's window statistics (counts summed
over all ranks since the last read) and logs
    codebook_usage       fraction of the K codes chosen at least once in the window,
    codebook_perplexity  exp(entropy) of the code distribution in the window (1..K),
    codebook_restarts    dead codes restarted in the window (and _total since the start);
a warning fires when usage falls below `usage_threshold`.
"""
from __future__ import annotations

from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from ...layers.quantizer import EMAVectorQuantizer
from ...registry import HOOKS


def find_quantizer(model) -> EMAVectorQuantizer | None:
    """The trainable EMA quantizer of a model (the tokenizer's own), if any."""
    model = model.module if is_model_wrapper(model) else model
    q = getattr(model, 'quantizer', None)
    if isinstance(q, EMAVectorQuantizer):
        return q
    for m in model.modules():
        if isinstance(m, EMAVectorQuantizer) and m.training:
            return m
    return None


@HOOKS.register_module()
class CodebookHealthHook(Hook):
    """Log codebook usage / perplexity / restarts over a window; warn on low usage.

    Args:
        interval: window length in iterations (keep it equal to the logger's interval so
            every logged line reports a fresh window).
        usage_threshold: warn when the window's usage is below this fraction.
        warmup_iters: no warning before this iteration (the codebook is still forming).
    """
    priority = 'NORMAL'  # before LoggerHook (BELOW_NORMAL): logged on the same iteration

    def __init__(self, interval: int = 50, usage_threshold: float = 0.5,
                 warmup_iters: int = 0) -> None:
        if interval < 1 or not 0 <= usage_threshold <= 1:
            raise ValueError(f'interval={interval} must be >= 1 and usage_threshold='
                             f'{usage_threshold} in [0, 1]')
        self.interval = interval
        self.usage_threshold = usage_threshold
        self.warmup_iters = warmup_iters
        self.history: list[dict] = []

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if not self.every_n_train_iters(runner, self.interval):
            return
        vq = find_quantizer(runner.model)
        if vq is None:
            return
        stats = vq.pop_window_stats()
        stats['restarts_total'] = float(vq.total_restarts)
        stats['iter'] = runner.iter + 1
        self.history.append(stats)
        hub = runner.message_hub
        hub.update_scalar('train/codebook_usage', stats['usage'])
        hub.update_scalar('train/codebook_perplexity', stats['perplexity'])
        hub.update_scalar('train/codebook_restarts', stats['restarts'])
        hub.update_scalar('train/codebook_restarts_total', stats['restarts_total'])
        if stats['usage'] < self.usage_threshold and runner.iter + 1 >= self.warmup_iters:
            runner.logger.warning(
                f'codebook usage {stats["usage"]:.1%} of {vq.num_embeddings} codes over the last '
                f'{self.interval} iterations is below {self.usage_threshold:.0%} (perplexity '
                f'{stats["perplexity"]:.1f}, {int(stats["restarts"])} restarts). Check '
                'restart_threshold, the learning rate and the codebook init.')
