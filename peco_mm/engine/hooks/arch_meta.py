"""Store what rebuilds the model in every checkpoint as plain data.

mmengine's Runner stores the run's config only as Python text (`meta['cfg']`). Readers that
need the model's arguments would have to parse that text; `ArchitectureMetaHook` writes them
as plain dicts beside it, which the weights-only loader reads back as data:

- `meta['tokenizer_parts']`: the part configs (encoder, decoder, quantizer) of the tokenizer,
  or of a pretraining model's target generator: what `FrozenPeCoTokenizer` rebuilds it from
  (files written before parts hold the old flat arguments in `meta['tokenizer_arch']`);
- `meta['model_cfg']`: the run's model config, which `ResumeCheckHook` compares with the
  config of a run that resumes from the checkpoint.
"""
from __future__ import annotations

from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from ...checkpoint import as_plain_data
from ...registry import HOOKS


@HOOKS.register_module()
class ArchitectureMetaHook(Hook):
    """Add `tokenizer_parts` and `model_cfg` to every checkpoint's meta (see the module
    docstring); a value that is not plain data (e.g. a class in a lazy config) is left out."""
    priority = 'VERY_LOW'

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        meta = checkpoint.setdefault('meta', {})
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        tokenizer = (model if hasattr(model, 'arch_parts')
                     else getattr(model, 'target_generator', None))
        parts = as_plain_data(getattr(tokenizer, 'arch_parts', None))
        if isinstance(parts, dict):
            meta['tokenizer_parts'] = parts
        model_cfg = as_plain_data(runner.cfg.get('model'))
        if isinstance(model_cfg, dict):
            meta['model_cfg'] = model_cfg
