"""A corpus of hostile checkpoint files, and what each must be refused with.

Every code-carrying file would create `MARKER` if anything ran it: the pickles through
`__reduce__` (os.system), the config texts through mmengine's `Config`, which executes them
(`test_hostile_files.py::test_the_corpus_is_live` checks that each one really does).
"""
import os
import random
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


# ---- plain data naming code: the registry names a tokenizer is rebuilt from -------------------
# a module of the test's own making; importing it, or calling its `touch`, creates the marker
TRACE_MODULE = 'hostile_trace'
_DOTTED = rf"'{TRACE_MODULE}\.touch' is not a name registered by peco_mm or a loaded host"
# file name -> the refusal of every route that rebuilds a tokenizer from the file
NAME_EXPECTED = {
    'parts_dotted_type': rf'meta\.tokenizer_parts\.encoder\.type: {_DOTTED}',
    'parts_decoder_dotted': rf'meta\.tokenizer_parts\.decoder\.type: {_DOTTED}',
    'parts_scope': (rf"meta\.tokenizer_parts\.encoder\._scope_: '{TRACE_MODULE}' is not the "
                    'scope of a loaded registry'),
    'parts_module_name': (rf"meta\.tokenizer_parts\.quantizer\.type: '{TRACE_MODULE}' is not "
                          'a name registered'),
    'arch_dotted_type': rf'meta\.tokenizer_arch\.encoder\.type: {_DOTTED}',
    'cfg_model_dotted': rf'meta\.cfg model\.encoder\.type: {_DOTTED}',
}
TINY_PARTS = dict(encoder=dict(type='CNNEncoder', base_channels=4, channel_mult=(1, 2),
                               num_res_blocks=1),
                  decoder=dict(type='CNNDecoder', base_channels=4, channel_mult=(1, 2),
                               num_res_blocks=1),
                  quantizer=dict(type='EMAVectorQuantizer', num_embeddings=16, embed_dims=8))


def name_payloads() -> dict[str, dict]:
    """name -> the part configs (encoder, decoder, quantizer) each hostile file stores."""
    dotted = dict(type=f'{TRACE_MODULE}.touch', code='print(1)')

    def parts(**changed):
        return {k: dict(changed.get(k, v)) for k, v in TINY_PARTS.items()}
    return {
        'parts_dotted_type': parts(encoder=dotted),
        'parts_decoder_dotted': parts(decoder=dotted),
        'parts_scope': parts(encoder=dict(TINY_PARTS['encoder'], _scope_=TRACE_MODULE)),
        'parts_module_name': parts(quantizer=dict(type=TRACE_MODULE)),
        'arch_dotted_type': parts(encoder=dotted),
        'cfg_model_dotted': parts(encoder=dotted),
    }


def build_name_corpus(root: Path) -> tuple[dict[str, Path], Path]:
    """(name -> file, the marker path): checkpoints whose plain meta data names the trace
    module as a registry type or scope; put `root` on sys.path to make the names live."""
    marker = root / 'NAME_MARKER'
    package = root / TRACE_MODULE
    package.mkdir(exist_ok=True)
    (package / '__init__.py').write_text(
        f'open({str(marker)!r}, "w").close()\n\n\ndef touch(**kwargs):\n'
        f'    open({str(marker)!r}, "w").close()\n')
    files = {}
    for name, parts in name_payloads().items():
        if name == 'cfg_model_dotted':  # an old file: the config text only
            meta = {'cfg': 'model = ' + repr(dict(type='PeCoTokenizer', **parts)) + '\n'}
        elif name == 'arch_dotted_type':  # an old file: flat arguments and part configs
            meta = {'tokenizer_arch': dict(num_embeddings=16, embed_dims=8,
                                           encoder=parts['encoder'])}
        else:
            meta = {'tokenizer_parts': parts}
        files[name] = root / f'{name}.pth'
        torch.save({'state_dict': {'quantizer.embedding': torch.zeros(16, 8)}, 'meta': meta},
                   files[name])
    assert set(files) == set(NAME_EXPECTED)
    return files, marker
