"""Check, before `load_from` is loaded, that the frozen target generator fits.

mmengine loads `load_from` with `strict=False`: a weight of another shape is skipped with a
log line and training goes on. For the MIM target generator that is silent damage: a
checkpoint whose tokenizer has another codebook size (or encoder) leaves the model with the
encoder of one tokenizer and the codebook of another, and pretraining learns targets that no
tokenizer produces (codebook usage near zero). `LoadFromCheckHook` refuses such a checkpoint
the way `ResumeCheckHook` refuses a resume of another run.
"""
from __future__ import annotations

from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from ...registry import HOOKS
from .resume_check import weight_diffs

FROZEN_PREFIXES = ('target_generator.', )  # parts that never train, so must fit exactly


@HOOKS.register_module()
class LoadFromCheckHook(Hook):
    """Raise ValueError when `load_from` holds target generator weights that do not fit this
    model (another shape, missing or extra tensors); a checkpoint without target generator
    weights (e.g. a converted backbone) passes.

    Args:
        checkpoint: the `load_from` file or http(s):// URL (tools/train.py fills it in); a
            URL is read as `load_from` reads it, from torch hub's cache.
    """
    priority = 'VERY_HIGH'

    def __init__(self, checkpoint: str | None = None) -> None:
        self.checkpoint = checkpoint

    def before_run(self, runner) -> None:
        from ...checkpoint import is_url, read_checkpoint
        if not self.checkpoint or ('://' in str(self.checkpoint)
                                   and not is_url(self.checkpoint)):
            return  # (other schemes: mmengine's loader, which peco_mm routes, says what)
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        ckpt = read_checkpoint(self.checkpoint)
        state = ckpt.get('state_dict', ckpt) if isinstance(ckpt, dict) else {}
        problems = frozen_part_diffs(state, model.state_dict())
        if problems:
            raise ValueError(
                f'load_from {self.checkpoint}: its target generator (the frozen tokenizer) '
                'does not fit this model: ' + '; '.join(problems) + '. Loading it would mix '
                'two tokenizers (weights of another shape are skipped), so the targets would '
                'come from a codebook nothing was trained on. Load a checkpoint made with the '
                'same tokenizer, or set model.target_generator.checkpoint to the tokenizer of '
                'that run.')


def frozen_part_diffs(state: dict, own: dict) -> list[str]:
    """What differs between the checkpoint's and the model's target generator weights (an
    empty list when the checkpoint has none)."""
    theirs = {k: v for k, v in state.items() if str(k).startswith(FROZEN_PREFIXES)}
    if not theirs:
        return []
    mine = {k: v for k, v in own.items() if k.startswith(FROZEN_PREFIXES)}
    return weight_diffs(theirs, mine)
