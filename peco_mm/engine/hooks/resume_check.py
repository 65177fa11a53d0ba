"""Check, before resuming, that the checkpoint belongs to this kind of run.

Resuming another run's checkpoint fails deep inside torch with bare messages: a tokenizer of
another width gives `The size of tensor a (32) must match the size of tensor b (64)`, a
pretraining checkpoint passed to a tokenizer run gives `loaded state dict has a different
number of parameter groups`. `ResumeCheckHook` runs before mmengine resumes (in `before_run`,
with the model built) and says in one line what differs: the model config stored in the
checkpoint (`meta.cfg`, written by every mmengine run) against this run's, and the weights'
names and shapes against this model's. The stored model config is read as data (the plain
dict `meta.model_cfg`, or the text `meta.cfg` through `parse_config_text`): nothing in the
checkpoint is run.
"""
from __future__ import annotations

import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from ...checkpoint import parse_config_text, read_checkpoint
from ...registry import HOOKS

# keys that say where weights come from, not what the model is
IGNORED_KEYS = ('init_cfg', 'checkpoint', 'pretrained')


@HOOKS.register_module()
class ResumeCheckHook(Hook):
    """Raise ValueError when the checkpoint to resume does not fit the model (another model
    type, missing or differently shaped weights); warn in one line when only the model config
    differs.

    Args:
        checkpoint: the checkpoint the run resumes from (tools/train.py fills it in).
    """
    priority = 'VERY_HIGH'

    def __init__(self, checkpoint: str | None = None) -> None:
        self.checkpoint = checkpoint

    def before_run(self, runner) -> None:
        if not self.checkpoint:
            return
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        # mmap: only the pickled metadata is read now, not the tensors
        ckpt = read_checkpoint(self.checkpoint, mmap=True)
        problems, fatal = compare_checkpoint(ckpt, runner.cfg, model, self.checkpoint)
        if not problems:
            return
        line = f'--resume {self.checkpoint} was written by another run: ' + '; '.join(problems)
        if fatal:
            raise ValueError(line + '. Resume with a checkpoint of this config, or start a new '
                             'work dir (load weights with load_from / init_cfg instead).')
        runner.logger.warning(line)


def compare_checkpoint(ckpt: dict, cfg: Config, model: torch.nn.Module | None,
                       path: str = 'checkpoint') -> tuple[list[str], bool]:
    """(what differs, whether resuming cannot work) between a checkpoint and this run."""
    problems, fatal = [], False
    old = stored_model_cfg(ckpt, path)
    new = cfg.get('model')
    if old is not None and isinstance(new, dict):
        new = new.to_dict() if hasattr(new, 'to_dict') else dict(new)
        if old.get('type') != new.get('type'):
            kind = old.get('type')
            kind = kind if isinstance(kind, str) and len(kind) <= 100 else short_repr(kind)
            problems.append(f"model.type {kind} in the checkpoint, {new.get('type')} in this "
                            'config')
            fatal = True
        else:
            diffs = config_diffs(old, new, 'model')
            problems += diffs[:3] + ([f'{len(diffs) - 3} more config keys'] if len(diffs) > 3
                                     else [])
    state = ckpt.get('state_dict') if isinstance(ckpt, dict) else None
    if isinstance(model, torch.nn.Module) and isinstance(state, dict):
        weights = weight_diffs(state, model.state_dict())
        problems += weights
        fatal = fatal or bool(weights)
    return problems, fatal


def stored_model_cfg(ckpt: dict, path: str = 'checkpoint') -> dict | None:
    """The model config a checkpoint was written with: the plain dict `meta.model_cfg`
    (`ArchitectureMetaHook`), else the `model` of the config text `meta.cfg` read as data
    (`parse_config_text`; text that is not plain data is refused, never run)."""
    meta = ckpt.get('meta') if isinstance(ckpt, dict) else None
    if not isinstance(meta, dict):
        return None
    if isinstance(meta.get('model_cfg'), dict):
        return meta['model_cfg']
    if not isinstance(meta.get('cfg'), str):
        return None
    model = parse_config_text(meta['cfg'], f'{path} meta.cfg').get('model')
    return model if isinstance(model, dict) else None


def config_diffs(old, new, key: str) -> list[str]:
    """'key: checkpoint X, this config Y' for every differing leaf, ignoring weight sources."""
    if key.split('.')[-1] in IGNORED_KEYS:
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            out += config_diffs(old.get(k), new.get(k), f'{key}.{k}')
        return out
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new)):
            out += config_diffs(a, b, f'{key}.{i}')
        return out
    if old != new:
        return [f'{key} {short_repr(old)} in the checkpoint, {short_repr(new)} in this config']
    return []


def short_repr(value) -> str:
    """`repr(value)`, at most 3 levels deep, 4 items a container and about 100 characters:
    bounded for any value read from a checkpoint (a list that holds one list twice, 60
    levels deep, is 2**60 items written out)."""
    import reprlib
    short = reprlib.Repr()
    short.maxlevel = 3
    short.maxdict = short.maxlist = short.maxtuple = short.maxset = short.maxfrozenset = 4
    short.maxstring, short.maxother, short.maxlong = 80, 80, 40
    text = short.repr(value)
    return text if len(text) <= 100 else text[:97] + '...'


def weight_diffs(state: dict, own: dict) -> list[str]:
    """Missing / unexpected / differently shaped weights, a few named."""
    out = []
    # extra state (the quantizer's random state) is absent from files written before it
    missing = [k for k in own if k not in state and k.rsplit('.', 1)[-1] != '_extra_state']
    unexpected = [k for k in state if k not in own]
    shaped = [k for k in own if k in state and hasattr(state[k], 'shape')
              and tuple(state[k].shape) != tuple(own[k].shape)]
    if shaped:
        k = shaped[0]
        out.append(f'{len(shaped)} weights of another shape (e.g. {k}: '
                   f'{tuple(state[k].shape)} in the checkpoint, {tuple(own[k].shape)} in this '
                   'model)')
    if missing:
        out.append(f'{len(missing)} of this model\'s weights missing (e.g. {missing[0]})')
    if unexpected:
        out.append(f'{len(unexpected)} unknown weights (e.g. {unexpected[0]})')
    return out
