"""Reading weights files, at ground level: imports nothing of peco_mm but `layers`.

- `reader`: the one gate every weights file passes (local file or URL, weights-only,
  safetensors; see docs/security.md), unwrapping a state dict and stripping prefixes;
- `stored_config`: the config text a checkpoint stores, read as data (never executed);
- `stored_names`: the closed schema's rules for a part a checkpoint's plain data rebuilds
  (`check_part`: a class from an explicit list, plain arguments of its signature);
- `keymaps`: other formats' key names mapped to PeCoViT's (the whole conversion);
- `vit_args`: a ViT's arguments read from its weights, and its position tables adapted;
- `mmengine_loaders`: mmengine's checkpoint schemes routed through the gate while PeCo's runs
  last (`checkpoints_through_gate`);
- `inert`: a file's other pickled objects read as inert stand-ins through the same
  weights-only unpickler (`read_checkpoint(path, inert_objects=True)`): nothing of them runs;
- `module_pickle`: the weights of a pickled `nn.Module` (OpenAI's DALL-E files), read off
  those stand-ins;
- `budget`: what one read may allocate and how deep what it holds may nest.
- `plain`: a checkpoint as plain data, which torch's weights-only loader reads with no
  allow-list (what the launcher writes), the message hub's buffers restored on resume.
"""
from .keymaps import (FORMATS, Conversion, cnn_backbone_state_dict, convert_checkpoint,
                      convert_state_dict, detect_format, tokenizer_state_dict)
from .mmengine_loaders import (MMENGINE_SCHEMES, checkpoints_through_gate,
                               load_from_weights_only)
from .module_pickle import read_module_state_dict
from .reader import (is_state_dict, is_url, read_checkpoint, select_prefix, strip_prefix,
                     unwrap)
from .stored_config import StoredConfigError, as_plain_data, parse_config_text
from .stored_names import StoredPart, check_part, check_plain, stored_part
from .vit_args import infer_pecovit_kwargs

__all__ = ['FORMATS', 'MMENGINE_SCHEMES', 'Conversion', 'StoredConfigError',
           'StoredPart', 'as_plain_data', 'check_part', 'check_plain', 'checkpoints_through_gate',
           'cnn_backbone_state_dict', 'convert_checkpoint',
           'convert_state_dict', 'detect_format', 'infer_pecovit_kwargs', 'is_state_dict',
           'is_url', 'load_from_weights_only', 'parse_config_text', 'read_checkpoint',
           'read_module_state_dict', 'stored_part',
           'select_prefix', 'strip_prefix', 'tokenizer_state_dict',
           'unwrap']
