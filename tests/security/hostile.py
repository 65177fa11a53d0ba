"""A corpus of hostile checkpoint files, and what each must be refused with.

Every code-carrying file would create `MARKER` if anything ran it: the pickles through
`__reduce__` (os.system), the config texts through mmengine's `Config`, which executes them
(`test_hostile_files.py::test_the_corpus_is_live` checks that each one really does).
"""
import os
import random
import shlex
from pathlib import Path

import torch

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
}
CODE_IN_CONFIG = ('cfg_import', 'cfg_base', 'cfg_custom_imports', 'cfg_expression',
                  'config_import', 'hub_cfg_import')


class Payload:
    """Pickled as a call to os.system(cmd)."""

    def __init__(self, cmd: str) -> None:
        self.cmd = cmd

    def __reduce__(self):
        return os.system, (self.cmd,)


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
    assert set(files) == set(EXPECTED)
    return files, marker, texts
