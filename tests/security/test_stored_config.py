"""A stored config is data: the text mmengine writes into checkpoints parses to what mmengine
itself reads from it, anything that is not plain data is refused by line and construct,
checkpoints written before the architecture was stored as data still load to the same codes,
and new checkpoints carry the architecture and model config as plain dicts."""
import importlib.util

import pytest
import torch

from tests.conftest import ROOT
from tests.tools.conftest import isolated_mmengine  # noqa: F401

LEGACY = ROOT / 'tests/security/data/legacy_tokenizer.pth'
LEGACY_CODES = ROOT / 'tests/security/data/legacy_tokenizer_codes.pt'


@pytest.mark.parametrize('config', [
    'configs/peco/tokenizer_vqvae_in1k.py',
    'configs/demo/tokenizer_tiny_photos.py',
    'configs/demo/pretrain_tiny_photos.py',
    'configs/peco/pretrain_mae_vitb_in1k_800e.py',  # dict({'neck.mask_token': ...})
])
def test_pretty_text_of_shipped_configs_parses_as_mmengine_reads_it(config):
    from mmengine.config import Config

    from peco_mm.checkpoint import parse_config_text
    text = Config.fromfile(str(ROOT / config)).pretty_text  # what the Runner stores
    assert parse_config_text(text, config) == Config.fromstring(text, '.py').to_dict()


def test_literals_and_dict_calls():
    from peco_mm.checkpoint import parse_config_text
    text = ("a = dict(x=-1.5, y=(1, 2), z={1, 2}, b=b'x', n=None, t=True, c=+2j)\n"
            "b = dict({'neck.mask_token': dict(decay_mult=0.0)}, rate=1.0)\n"
            "c = [dict(type='LoadImageFromFile'), {'k': [1, 'two']}]\n"
            "custom_imports = dict(imports=['peco_mm'], allow_failed_imports=False)\n")
    assert parse_config_text(text, 'cfg') == {
        'a': dict(x=-1.5, y=(1, 2), z={1, 2}, b=b'x', n=None, t=True, c=2j),
        'b': {'neck.mask_token': {'decay_mult': 0.0}, 'rate': 1.0},
        'c': [{'type': 'LoadImageFromFile'}, {'k': [1, 'two']}],
        'custom_imports': {'imports': ['peco_mm'], 'allow_failed_imports': False}}


@pytest.mark.parametrize('text, line, construct', [
    ('import os', 1, 'an import'),
    ('a = 1\nfrom os import path', 2, 'an import'),
    ('x = os', 1, "the name 'os'"),
    ('x = inf', 1, "the name 'inf'"),
    ('x = os.path.join', 1, 'attribute access os.path.join'),
    ("x = __import__('os').system('true')", 1, r'a call to __import__\(\)\.system\(\)'),
    ("model = dict(\n  a=1,\n  b=open('f'))", 3, r'a call to open\(\)'),
    ('x = dict(**y)', 1, r'\*\* unpacking'),
    ('x = {**y}', 1, r'\*\* unpacking'),
    ('x = dict([(1, 2)])', 1, r'dict\(\) with positional arguments'),
    ('x = lambda: 1', 1, 'a lambda'),
    ('x = [i for i in range(3)]', 1, 'a comprehension'),
    ("x = f'{y}'", 1, 'an f-string'),
    ('x = 1 + 2', 1, r'an operator \(BinOp\)'),
    ('x = y = 1', 1, 'an assignment to something other than one plain name'),
    ('x, y = 1, 2', 1, 'an assignment to something other than one plain name'),
    ('x: int = 1', 1, 'a AnnAssign statement'),
    ('print(1)', 1, r'a bare expression \(a call to print\(\)\)'),
    ('def f():\n    pass', 1, 'a FunctionDef statement'),
    ('if True:\n    x = 1', 1, 'a If statement'),
    ("_base_ = 'other.py'", 1, r'_base_ \(inherits another file\)'),
    ("custom_imports = dict(imports=['os'])", 1, r"custom_imports of \['os'\]"),
    ('custom_imports = dict(imports=1)', 1, 'custom_imports without a list of module names'),
    ('x = (', 1, r'not valid config text'),
    ('x = ...', 1, r'\.\.\.'),
])
def test_anything_else_is_refused_by_line_and_construct(text, line, construct):
    from peco_mm.checkpoint import StoredConfigError, parse_config_text
    with pytest.raises(StoredConfigError, match=rf'^ckpt\.pth meta\.cfg line {line}: '
                       rf'{construct}'):
        parse_config_text(text, 'ckpt.pth meta.cfg')


def test_as_plain_data():
    from mmengine.config import ConfigDict

    from peco_mm.checkpoint import as_plain_data
    cfg = ConfigDict(type='PeCo', arch=dict(depth=(1, 2)), layers=[1, None])
    plain = as_plain_data(cfg)
    assert plain == {'type': 'PeCo', 'arch': {'depth': (1, 2)}, 'layers': [1, None]}
    assert type(plain) is dict and type(plain['arch']) is dict
    assert as_plain_data(dict(type=torch.nn.Linear)) is None
    assert as_plain_data([1, object()]) is None


def test_a_checkpoint_of_the_earlier_format_gives_the_same_codes():
    """The committed file was written by tools/train.py before checkpoints stored the
    architecture as data (tests/security/make_legacy_tokenizer.py); its architecture now comes
    from the config text read as data."""
    from peco_mm.tokenizer import FrozenPeCoTokenizer
    from peco_mm.checkpoint import read_checkpoint
    ckpt = read_checkpoint(LEGACY)
    assert 'tokenizer_arch' not in ckpt['meta'] and 'model = dict(' in ckpt['meta']['cfg']
    ref = torch.load(LEGACY_CODES, weights_only=True)
    tok = FrozenPeCoTokenizer(str(LEGACY))
    assert torch.equal(tok.encode(ref['img']), ref['codes'])
    assert tok.num_embeddings == 16


PARTS_MODEL = """cnn = dict(base_channels=4, channel_mult=(1, 2, 2), num_res_blocks=1)
model = dict(encoder=cnn, decoder=cnn, quantizer=dict(num_embeddings=16, embed_dims=8, decay=0.9),
             perceptual_weight=0.0)
"""


def test_new_checkpoints_store_the_architecture_as_data(tmp_path, isolated_mmengine):  # noqa: F811
    """A tokenizer trained now stores its part configs (`tokenizer_parts`) and `model_cfg`;
    with its config text removed it still rebuilds the same tokenizer."""
    spec = importlib.util.spec_from_file_location(
        'make_legacy_tokenizer', ROOT / 'tests/security/make_legacy_tokenizer.py')
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    from peco_mm.supervisor.launch import run
    from peco_mm.tokenizer import FrozenPeCoTokenizer
    from peco_mm.tooling.demo_data import make_class_folder
    make_class_folder(tmp_path / 'data' / 'train', per_class=2, size=32)
    flat_model = script.CONFIG[script.CONFIG.index('model = '):script.CONFIG.index('train_')]
    config = script.CONFIG.replace(flat_model, PARTS_MODEL)
    (tmp_path / 'tok.py').write_text(config.format(root=ROOT, data=tmp_path / 'data'))
    run(str(tmp_path / 'tok.py'), str(tmp_path / 'work'))
    from peco_mm.checkpoint import read_checkpoint
    ckpt = read_checkpoint(tmp_path / 'work' / 'iter_2.pth')
    meta = ckpt['meta']
    cnn = dict(base_channels=4, channel_mult=(1, 2, 2), num_res_blocks=1)
    assert 'tokenizer_arch' not in meta and meta['tokenizer_parts'] == dict(
        encoder=dict(type='CNNEncoder', **cnn), decoder=dict(type='CNNDecoder', **cnn),
        quantizer=dict(type='EMAVectorQuantizer', num_embeddings=16, embed_dims=8, decay=0.9,
                       beta=0.25, init='data', restart_threshold=0.1))
    assert meta['model_cfg']['type'] == 'PeCoTokenizer'
    assert meta['model_cfg']['quantizer']['decay'] == 0.9
    del meta['cfg']
    torch.save({'state_dict': ckpt['state_dict'], 'meta': meta}, tmp_path / 'no_text.pth')
    tok = FrozenPeCoTokenizer(str(tmp_path / 'no_text.pth'))
    ref = FrozenPeCoTokenizer(str(tmp_path / 'work' / 'iter_2.pth'))
    x = torch.rand(1, 3, 32, 32) * 2 - 1
    assert torch.equal(tok.encode(x), ref.encode(x))
