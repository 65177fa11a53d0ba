"""A corpus of hostile checkpoint files, and what each must be refused with.

Every code-carrying file would create `MARKER` if anything ran it: the pickles through
`__reduce__` (os.system), the config texts through mmengine's `Config`, which executes them
(`test_hostile_files.py::test_the_corpus_is_live` checks that each one really does).
"""
import json
import os
import random
import re
import shlex
import zipfile
from pathlib import Path

import torch

from tests.security.budget_payloads import BUDGET_EXPECTED, build_budget_corpus

# file name -> the refusal its one-line error must contain (a regular expression)
EXPECTED = {
    'pickle_zip': r'holds pickled Python objects .*GLOBAL \w+\.system',
    'pickle_legacy': r'holds pickled Python objects .*GLOBAL \w+\.system',
    'cfg_import': r'meta\.cfg line 1: a call to __import__\(\)\.system\(\) is not plain data',
    'cfg_base': r'meta\.cfg line 1: _base_ \(inherits another file\) is not plain data',
    'cfg_custom_imports': r"meta\.cfg line 1: custom_imports of \['evil_plugin'\]",
    'cfg_expression': r'meta\.cfg line 3: a call to __import__\(\)\.system\(\) is not plain',
    'config_import': r'meta\.config line 1: a call to __import__\(\)\.system\(\) is not plain',
    'hub_cfg_import': r'message_hub\.runtime_info\.cfg line 1: a call to __import__\(\)',
    'empty': r'empty file \(0 bytes\), not a checkpoint',
    'random': r'not a torch checkpoint \(4096 bytes',
    'truncated_zip': r'truncated or corrupt zip archive',
    # what the weights-only unpickler would allocate, against the tests' budget (1 MiB)
    'alloc_bytearray': r'would allocate 838\d{4} bytes \(builtins\.bytearray\(\.\.\.\)\), more '
                       r'than a read may allocate',
    'alloc_bytearray_legacy': r'would allocate 838\d{4} bytes \(builtins\.bytearray',
    'alloc_tensor': r'would allocate 838\d{4} bytes \(torch\.FloatTensor\(\.\.\.\)\)',
    'zip_bomb': r'its zip entries unpack to 838\d{4} bytes, more than a read may allocate',
    'deep_nesting': r'holds data nested deeper than 100 levels',
    **BUDGET_EXPECTED,  # sizes as numpy integers, numpy arrays, shared keys, a zip's pickle twice
}
# PECO_MM_READ_BUDGET_MB while the corpus is read: each allocation payload asks for 8 MiB
BUDGET_MB = '1'
ALLOCATION = ('alloc_bytearray', 'alloc_bytearray_legacy', 'alloc_tensor', 'zip_bomb')
CODE_IN_CONFIG = ('cfg_import', 'cfg_base', 'cfg_custom_imports', 'cfg_expression',
                  'config_import', 'hub_cfg_import')


class Payload:
    """Pickled as a call to os.system(cmd)."""

    def __init__(self, cmd: str) -> None:
        self.cmd = cmd

    def __reduce__(self):
        return os.system, (self.cmd,)


class Sized:
    """Pickled as a call to an allow-listed constructor with a size, e.g. bytearray(n)."""

    def __init__(self, constructor, *args) -> None:
        self.call = constructor, args

    def __reduce__(self):
        return self.call


def build_corpus(root: Path) -> tuple[dict[str, Path], Path, dict[str, str]]:
    """(name -> hostile file, the marker path, name -> stored config text) under `root`."""
    marker = root / 'MARKER'
    touch = f'touch {shlex.quote(str(marker))}'
    code = f"__import__('os').system({touch!r})"
    (root / 'evil_base.py').write_text(f'_x = {code}\n')
    (root / 'evil_plugin.py').write_text(f'{code}\n')
    weights = {'state_dict': {'w': torch.ones(4)}}
    texts = {
        'cfg_import': f"_x = {code}\nmodel = dict(type='PeCoTokenizer')\n",
        'cfg_base': (f"_base_ = {str(root / 'evil_base.py')!r}\n"
                     "model = dict(type='PeCoTokenizer')\n"),
        'cfg_custom_imports': ("custom_imports = dict(imports=['evil_plugin'])\n"
                               "model = dict(type='PeCoTokenizer')\n"),
        'cfg_expression': f"model = dict(\n    type='PeCoTokenizer',\n    base_channels={code})\n",
        'config_import': f'gpu_ids = [{code}]\n',
        'hub_cfg_import': f"_x = {code}\nmodel = dict(type='PeCoTokenizer')\n",
    }
    files = {}

    def save(name, obj, **kw):
        files[name] = root / f'{name}.pth'
        torch.save(obj, files[name], **kw)

    save('pickle_zip', {**weights, 'x': Payload(touch)})
    save('pickle_legacy', {**weights, 'x': Payload(touch)}, _use_new_zipfile_serialization=False)
    for name, text in texts.items():
        if name == 'hub_cfg_import':  # the copy mmengine keeps in the message hub
            save(name, {**weights, 'message_hub': {'runtime_info': {'cfg': text}}})
        else:
            save(name, {**weights, 'meta': {'config' if name == 'config_import' else 'cfg':
                                            text}})
    files['empty'] = root / 'empty.pth'
    files['empty'].write_bytes(b'')
    files['random'] = root / 'random.pth'
    files['random'].write_bytes(random.Random(0).randbytes(4096))
    save('whole', {'state_dict': {'w': torch.ones(4096)}})
    files['truncated_zip'] = root / 'truncated_zip.pth'
    files['truncated_zip'].write_bytes(files.pop('whole').read_bytes()[:8000])
    save('alloc_bytearray', {**weights, 'x': Sized(bytearray, 8 << 20)})
    save('alloc_bytearray_legacy', {**weights, 'x': Sized(bytearray, 8 << 20)},
         _use_new_zipfile_serialization=False)
    save('alloc_tensor', {**weights, 'x': Sized(torch.FloatTensor, 1 << 20)})
    save('zip_inner', {**weights, 'x': 'a' * (8 << 20)})  # rewritten deflated: 9 kB
    with zipfile.ZipFile(files.pop('zip_inner')) as src, \
            zipfile.ZipFile(root / 'zip_bomb.pth', 'w', zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
    files['zip_bomb'] = root / 'zip_bomb.pth'
    deep: list = []
    for _ in range(150):
        deep = [deep]
    save('deep_nesting', {**weights, 'x': deep})
    files.update(build_budget_corpus(root))
    assert set(files) == set(EXPECTED)
    return files, marker, texts


# ---- plain data naming code: what a tokenizer is rebuilt from -----------------------------------
# a module of the test's own making; importing it, or calling its `touch`, creates the marker
TRACE_MODULE = 'hostile_trace'
# a name registered by mmengine outside MODELS: mmengine's MODELS.get imports it as a module
OTHER_REGISTRY_NAME = 'LocalVisBackend'
# a registered host builder that runs a folder's Python (transformers' trust_remote_code)
REMOTE_CODE_TYPE = 'mmpretrain.AutoModelForCausalLM'
REMOTE_CODE_FOLDER = 'remote_code_model'
_ENCODERS = 'allowed: CNNEncoder, ViTEncoder'


def _not_a_part(name: str, slot: str, allowed: str) -> str:
    return rf"'{name}' is not a part a checkpoint may rebuild as the {slot}; {allowed}"


_DOTTED = _not_a_part(rf'{TRACE_MODULE}\.touch', 'encoder', _ENCODERS)
_REMOTE = _not_a_part(re.escape(REMOTE_CODE_TYPE), 'encoder', _ENCODERS)
# file name -> the refusal of every route that rebuilds a tokenizer from the file
NAME_EXPECTED = {
    'parts_dotted_type': rf'meta\.tokenizer_parts\.encoder\.type: {_DOTTED}',
    'parts_decoder_dotted': (rf'meta\.tokenizer_parts\.decoder\.type: ' + _not_a_part(
        rf'{TRACE_MODULE}\.touch', 'decoder', 'allowed: CNNDecoder, ViTDecoder')),
    'parts_scope': (r'meta\.tokenizer_parts\.encoder\._scope_: not an argument a checkpoint '
                    r'may give CNNEncoder; allowed: base_channels, '),
    'parts_module_name': (r'meta\.tokenizer_parts\.quantizer\.type: ' + _not_a_part(
        TRACE_MODULE, 'quantizer', 'allowed: EMAVectorQuantizer, GumbelQuantizer')),
    'arch_dotted_type': rf'meta\.tokenizer_arch\.encoder\.type: {_DOTTED}',
    'cfg_model_dotted': rf'meta\.cfg model\.encoder\.type: {_DOTTED}',
    # a registered name runs code: a host builder with trust_remote_code, in every format
    'parts_remote_code': rf'meta\.tokenizer_parts\.encoder\.type: {_REMOTE}',
    'arch_remote_code': rf'meta\.tokenizer_arch\.encoder\.type: {_REMOTE}',
    'cfg_model_remote_code': rf'meta\.cfg model\.encoder\.type: {_REMOTE}',
    # a name registered in another registry is imported as a module by MODELS
    'parts_other_registry': (r'meta\.tokenizer_parts\.quantizer\.type: ' + _not_a_part(
        OTHER_REGISTRY_NAME, 'quantizer', 'allowed: EMAVectorQuantizer, GumbelQuantizer')),
    # an allowed class with a nested part, a path, or an argument not of its signature
    'parts_nested_type': (r'meta\.tokenizer_parts\.encoder\.init_cfg: not an argument a '
                          r'checkpoint may give ViTEncoder; allowed: arch, '),
    'parts_path_argument': (r'meta\.tokenizer_parts\.encoder\.arch: \'/.*\' is not a plain '
                            r'word .*a path, URL, module name or other text is never'),
    'arch_vit_cfg_nested': (r'meta\.tokenizer_arch\.vit_cfg\.init_cfg: not an argument a '
                            r'checkpoint may give ViTEncoder'),
}
# the payloads mmengine's MODELS.build runs in any process (the others need a host's models
# imported, or a ViT's init_weights)
LIVE_IN_PROCESS = ('parts_dotted_type', 'parts_decoder_dotted', 'parts_scope',
                   'parts_module_name', 'arch_dotted_type', 'cfg_model_dotted',
                   'parts_other_registry')
REMOTE_CODE_PAYLOADS = ('parts_remote_code', 'arch_remote_code', 'cfg_model_remote_code')
TINY_PARTS = dict(encoder=dict(type='CNNEncoder', base_channels=4, channel_mult=(1, 2),
                               num_res_blocks=1),
                  decoder=dict(type='CNNDecoder', base_channels=4, channel_mult=(1, 2),
                               num_res_blocks=1),
                  quantizer=dict(type='EMAVectorQuantizer', num_embeddings=16, embed_dims=8))


def name_payloads(root: Path) -> dict[str, dict]:
    """name -> the part configs (encoder, decoder, quantizer) each hostile file stores."""
    dotted = dict(type=f'{TRACE_MODULE}.touch', code='print(1)')
    remote = dict(type=REMOTE_CODE_TYPE, name_or_path=str(root / REMOTE_CODE_FOLDER),
                  trust_remote_code=True)
    vit = dict(type='ViTEncoder', arch='test', img_size=16, patch_size=8)

    def parts(**changed):
        return {k: dict(changed.get(k, v)) for k, v in TINY_PARTS.items()}
    return {
        'parts_dotted_type': parts(encoder=dotted),
        'parts_decoder_dotted': parts(decoder=dotted),
        'parts_scope': parts(encoder=dict(TINY_PARTS['encoder'], _scope_=TRACE_MODULE)),
        'parts_module_name': parts(quantizer=dict(type=TRACE_MODULE)),
        'arch_dotted_type': parts(encoder=dotted),
        'cfg_model_dotted': parts(encoder=dotted),
        'parts_remote_code': parts(encoder=remote),
        'arch_remote_code': parts(encoder=remote),
        'cfg_model_remote_code': parts(encoder=remote),
        'parts_other_registry': parts(quantizer=dict(type=OTHER_REGISTRY_NAME)),
        'parts_nested_type': parts(encoder=dict(vit, init_cfg=dict(remote, type='Pretrained'))),
        'parts_path_argument': parts(encoder=dict(vit, arch=str(root / 'arch.py'))),
        'arch_vit_cfg_nested': parts(encoder=dict(vit, init_cfg=remote)),
    }


def write_trace_code(root: Path, marker: Path) -> None:
    """Under `root`: the trace module, a module named like the other registry's name, and a
    transformers model folder whose remote code creates `marker` when imported."""
    touch = f'open({str(marker)!r}, "w").close()\n'
    package = root / TRACE_MODULE
    package.mkdir(exist_ok=True)
    (package / '__init__.py').write_text(f'{touch}\n\ndef touch(**kwargs):\n    {touch}')
    (root / f'{OTHER_REGISTRY_NAME}.py').write_text(touch)
    folder = root / REMOTE_CODE_FOLDER
    folder.mkdir(exist_ok=True)
    (folder / 'config.json').write_text(json.dumps(dict(
        model_type='peco_trace', auto_map=dict(AutoConfig='trace_code.TraceConfig',
                                               AutoModelForCausalLM='trace_code.TraceModel'))))
    (folder / 'trace_code.py').write_text(
        f'{touch}from transformers import PretrainedConfig\n\n\n'
        'class TraceConfig(PretrainedConfig):\n    model_type = "peco_trace"\n')


def build_name_corpus(root: Path) -> tuple[dict[str, Path], Path]:
    """(name -> file, the marker path): checkpoints whose plain meta data names code (a
    module, a registered host builder, a nested part, a path); put `root` on sys.path to
    make the module names live."""
    marker = root / 'NAME_MARKER'
    marker.unlink(missing_ok=True)
    write_trace_code(root, marker)
    files = {}
    for name, parts in name_payloads(root).items():
        if name.startswith('cfg_model'):  # an old file: the config text only
            meta = {'cfg': 'model = ' + repr(dict(type='PeCoTokenizer', **parts)) + '\n'}
        elif name == 'arch_vit_cfg_nested':  # an old ViT file: vit_cfg holds its arguments
            vit_cfg = {k: v for k, v in parts['encoder'].items() if k != 'type'}
            meta = {'tokenizer_arch': dict(encoder_type='vit', vit_cfg=vit_cfg,
                                           num_embeddings=16, embed_dims=8)}
        elif name.startswith('arch'):  # an old file: flat arguments and part configs
            meta = {'tokenizer_arch': dict(num_embeddings=16, embed_dims=8,
                                           encoder=parts['encoder'])}
        else:
            meta = {'tokenizer_parts': parts}
        files[name] = root / f'{name}.pth'
        torch.save({'state_dict': {'quantizer.embedding': torch.zeros(16, 8)}, 'meta': meta},
                   files[name])
    assert set(files) == set(NAME_EXPECTED)
    return files, marker
