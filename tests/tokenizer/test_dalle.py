"""DALL-E as a tokenizer: OpenAI's pickled-module files read without running them, the decoder
against the architecture computed step by step, and the tokenizer's interface."""
import pickle
import sys

import pytest
import torch
import torch.nn.functional as F

from peco_mm.checkpoint import read_module_state_dict
from peco_mm.tokenizer import CodewordPoolBackbone, DalleDecoder, DalleTokenizer
from tests.tokenizer.dalle_files import TINY, save_as_openai_pickle, write_tiny_dalle


@pytest.fixture(scope='module')
def dalle_files(tmp_path_factory):
    return write_tiny_dalle(tmp_path_factory.mktemp('dalle'))


def images(n=2, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, size, size, generator=g) * 2 - 1


def reference_decode(sd: dict, codes: torch.Tensor, groups: int, blocks: int) -> torch.Tensor:
    """DALL-E's decoder as Ramesh et al. describe it, computed from the weights step by step."""
    def conv(x, name):
        w = sd[f'{name}.w']
        return F.conv2d(x, w, sd[f'{name}.b'], padding=(w.shape[-1] - 1) // 2)
    x = conv(F.one_hot(codes, sd['blocks.input.w'].shape[1]).permute(0, 3, 1, 2).float(),
             'blocks.input')
    for g in range(1, groups + 1):
        for b in range(1, blocks + 1):
            p = f'blocks.group_{g}.block_{b}'
            skip = conv(x, f'{p}.id_path') if f'{p}.id_path.w' in sd else x
            r = x
            for i in range(1, 5):
                r = conv(F.relu(r), f'{p}.res_path.conv_{i}')
            x = skip + r / (groups * blocks) ** 2
        if g < groups:
            x = F.interpolate(x, scale_factor=2, mode='nearest')
    x = conv(F.relu(x), 'blocks.output.conv')
    return ((torch.sigmoid(x[:, :3]) - 0.1) / 0.8).clamp(0, 1) * 2 - 1


def test_a_pickled_module_reads_as_its_state_dict_without_its_package(tmp_path):
    dec = DalleDecoder(vocab_size=32, n_hid=8, n_init=8, blocks_per_group=1)
    path = tmp_path / 'decoder.pkl'
    save_as_openai_pickle(dec, path)
    assert 'dall_e' not in sys.modules
    with pytest.raises(pickle.UnpicklingError, match='dall_e'):  # what torch alone says
        torch.load(path, weights_only=True)
    state = read_module_state_dict(str(path))
    assert list(state) == list(dec.state_dict())
    for k, v in dec.state_dict().items():
        assert torch.equal(state[k], v), k
    assert 'dall_e' not in sys.modules


def test_a_legacy_pickled_module_is_refused_saying_what_to_do(tmp_path):
    """Legacy files (torch < 1.6) record each module's source code, which torch's weights-only
    unpickler refuses; a legacy state dict still reads."""
    dec = DalleDecoder(vocab_size=32, n_hid=8, n_init=8, blocks_per_group=1)
    path = tmp_path / 'decoder.pkl'
    with pytest.warns(UserWarning, match='source code'):
        save_as_openai_pickle(dec, path, legacy=True)
    with pytest.raises(ValueError, match=r'decoder\.pkl: a module pickled in the legacy format'
                                         r'.*save its state_dict\(\)'):
        read_module_state_dict(str(path))
    torch.save(dec.state_dict(), tmp_path / 'sd.pth', _use_new_zipfile_serialization=False)
    state = read_module_state_dict(str(tmp_path / 'sd.pth'))
    assert torch.equal(state['blocks.input.w'], dec.blocks.input.w)


class Tripwire:
    """Unpickling it as a plain torch.load would runs `__setstate__`, which creates `marker`."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __setstate__(self, state):
        open(state['marker'], 'w').close()


class ExecTripwire:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f'open({self.marker!r}, "w").close()',))


def test_nothing_a_pickled_module_names_is_run(tmp_path):
    marker = tmp_path / 'ran'
    pickle.loads(pickle.dumps(Tripwire(marker)))  # the payload is live
    assert marker.exists()
    marker.unlink()
    dec = DalleDecoder(vocab_size=32, n_hid=8, n_init=8, blocks_per_group=1)
    path = tmp_path / 'decoder.pkl'
    save_as_openai_pickle(dec, path, extra={'tripwire': Tripwire(marker)})
    state = read_module_state_dict(str(path))
    assert not marker.exists()
    assert set(state) == set(dec.state_dict())


def test_a_pickled_call_of_a_builtin_is_refused_naming_it(tmp_path):
    marker = tmp_path / 'ran'
    pickle.loads(pickle.dumps(ExecTripwire(marker)))
    assert marker.exists()
    marker.unlink()
    dec = DalleDecoder(vocab_size=32, n_hid=8, n_init=8, blocks_per_group=1)
    path = tmp_path / 'decoder.pkl'
    save_as_openai_pickle(dec, path, extra={'tripwire': ExecTripwire(marker)})
    with pytest.raises(ValueError, match=r'decoder\.pkl holds pickled Python objects .* even as '
                                         'inert stand-ins .*GLOBAL exec was not an allowed'):
        read_module_state_dict(str(path))
    assert not marker.exists()


def test_a_pickled_call_into_os_is_refused_naming_the_file(tmp_path):
    class Shell:
        def __reduce__(self):
            import os
            return (os.system, ('true',))
    dec = DalleDecoder(vocab_size=32, n_hid=8, n_init=8, blocks_per_group=1)
    path = tmp_path / 'decoder.pkl'
    save_as_openai_pickle(dec, path, extra={'shell': Shell()})
    with pytest.raises(ValueError, match=r'decoder\.pkl holds pickled .* even as inert stand-ins '
                                         r'.*GLOBAL posix\.system whose module posix is blocked'):
        read_module_state_dict(str(path))


class SharedBlock(torch.nn.Module):
    """A module whose two children are one module (`a` and `b`)."""

    def __init__(self, child=None) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))
        if child is not None:
            self.a = self.b = child


def test_a_pickled_module_with_shared_children_is_walked_once(tmp_path, monkeypatch):
    """12 levels of a child shared by two names: 2**13 paths, each module read once (under
    the first name), so sharing cannot make the walk run away. 20 levels (2**21 paths, tens
    of millions of objects to a walk that does not remember) are refused before the read:
    shared references may add at most MAX_SHARED_EXPANSION objects."""
    import types
    fake = types.ModuleType('dall_e_shared')
    fake.SharedBlock = type('SharedBlock', (SharedBlock,), {'__module__': 'dall_e_shared'})
    monkeypatch.setitem(sys.modules, 'dall_e_shared', fake)  # while saving only
    for levels in (12, 20):
        node = fake.SharedBlock()
        for _ in range(levels):
            node = fake.SharedBlock(node)
        torch.save(node, tmp_path / f'shared{levels}.pkl')
    monkeypatch.delitem(sys.modules, 'dall_e_shared')
    state = read_module_state_dict(str(tmp_path / 'shared12.pkl'))
    assert list(state) == ['w'] + ['a.' * i + 'w' for i in range(1, 13)]
    with pytest.raises(ValueError, match=r'shared20\.pkl: holds objects shared so often that '
                       r'a walk of it meets more than \d+ \(the file writes \d+; shared '
                       r'references may add at most 1048576 more\); not read'):
        read_module_state_dict(str(tmp_path / 'shared20.pkl'))


@pytest.mark.parametrize('inert', [False, True])
def test_a_pickled_call_that_fails_is_one_clear_refusal(tmp_path, inert):
    """An allow-listed constructor given arguments it refuses (complex('a', 'b') raises
    TypeError inside the unpickler): one line naming the file, not a traceback."""
    from peco_mm.checkpoint import read_checkpoint

    class BadCall:
        def __reduce__(self):
            return complex, ('a', 'b')
    torch.save({'w': torch.ones(2), 'x': BadCall()}, tmp_path / 'bad.pth')
    with pytest.raises(ValueError, match=rf'^{tmp_path / "bad.pth"}: unreadable torch '
                       r'checkpoint, truncated or corrupt \(TypeError: complex\(\) '):
        read_checkpoint(tmp_path / 'bad.pth', inert_objects=inert)


def test_the_tokenizer_codes_as_mmpretrains_encoder_and_decodes_as_the_architecture(
        dalle_files):
    enc_path, dec_path, sd = dalle_files
    tok = DalleTokenizer(enc_path, dec_path)
    img = images()
    codes = tok.encode(img)
    assert codes.shape == (2, 4, 4) and codes.dtype == torch.long
    # mmpretrain's encoder on DALL-E's mapped input, 0.8 x + 0.1 for x in [0, 1]
    from mmpretrain.models.selfsup.cae import DALLEEncoder
    ref = DALLEEncoder(group_count=4, n_hid=TINY['n_hid'], n_blk_per_group=1,
                       vocab_size=TINY['vocab_size'])
    ref.load_state_dict(sd['encoder'])
    assert torch.equal(codes, ref((img + 1) / 2 * 0.8 + 0.1).argmax(1))
    assert codes.unique().numel() > 1
    recon = tok.decode(codes)
    assert recon.shape == img.shape
    expected = reference_decode(sd['decoder'], codes, 4, 1)
    torch.testing.assert_close(recon, expected, rtol=1e-5, atol=1e-6)
    assert recon.std() > 0.01  # the check compares images, not two constants


def test_codewords_are_the_decoders_code_embedding(dalle_files):
    _, dec_path, sd = dalle_files
    tok = DalleTokenizer(decoder=dec_path)
    codes = torch.tensor([[[0, 5], [31, 5]]])
    vectors = tok.codewords(codes)  # (1, 8, 2, 2)
    w, b = sd['decoder']['blocks.input.w'][:, :, 0, 0], sd['decoder']['blocks.input.b']
    torch.testing.assert_close(vectors[0, :, 1, 0], w[:, 31] + b)
    torch.testing.assert_close(vectors[0, :, 0, 1], vectors[0, :, 1, 1])
    # the decoder's first feature map is exactly these vectors
    one_hot = tok.one_hot(codes)
    torch.testing.assert_close(tok.decoder.blocks.input(one_hot), vectors)


def test_the_codeword_probe_backbone_takes_dalle(dalle_files):
    enc_path, dec_path, _ = dalle_files
    backbone = CodewordPoolBackbone(tokenizer=dict(type='DalleTokenizer', encoder=enc_path,
                                                   decoder=dec_path))
    assert backbone.embed_dims == TINY['n_init']
    img = images()
    tok = backbone.tokenizer
    (feat,) = backbone(img)
    torch.testing.assert_close(feat, tok.codewords(tok.encode(img)).mean((2, 3)))
    with pytest.raises(ValueError, match='not both'):
        CodewordPoolBackbone('x.pth', tokenizer=dict(type='DalleTokenizer', decoder=dec_path))


def test_the_encoder_reads_from_a_beit_pretraining_checkpoint(tmp_path, dalle_files):
    enc_path, _, sd = dalle_files
    vit = {'backbone.cls_token': torch.zeros(1, 1, 8)}
    beit = dict(state_dict={**vit, **{f'target_generator.{k}': v
                                      for k, v in sd['encoder'].items()}})
    path = tmp_path / 'beit.pth'
    torch.save(beit, path)
    img = images()
    codes = DalleTokenizer(encoder=str(path)).encode(img)
    assert torch.equal(codes, DalleTokenizer(encoder=enc_path).encode(img))


def test_wrong_files_say_what_was_expected(tmp_path, dalle_files):
    enc_path, dec_path, _ = dalle_files
    with pytest.raises(FileNotFoundError,
                       match=r"checkpoint 'nowhere\.pkl' not found; set tokenizer\.decoder="):
        DalleTokenizer(decoder='nowhere.pkl')
    with pytest.raises(ValueError, match=r'encoder\.pkl \(tokenizer\.decoder\) holds a DALL-E '
                                         r'encoder \(input conv \(8, 3, 7, 7\)\), not the decoder'):
        DalleTokenizer(decoder=enc_path)
    other = write_tiny_dalle(tmp_path, vocab_size=16)[1]
    with pytest.raises(ValueError, match=r'has 32 codes, .*decoder\.pkl\) 16: not one DALL-E'):
        DalleTokenizer(enc_path, other)
    torch.save({'w': torch.zeros(1)}, tmp_path / 'other.pth')
    with pytest.raises(ValueError, match=r'other\.pth \(tokenizer\.encoder\) holds no DALL-E'):
        DalleTokenizer(str(tmp_path / 'other.pth'))
    tok = DalleTokenizer(decoder=dec_path)
    with pytest.raises(RuntimeError, match='without its encoder'):
        tok.encode(images())
    with pytest.raises(ValueError, match='multiples of 8'):
        DalleTokenizer(encoder=enc_path).encode(images(size=30))


def test_dalles_default_size_is_the_papers():
    """The BEiT tokenizer's 53.8 M parameters of the paper's tokenizer table are its encoder's;
    the decoder at DALL-E's sizes has 43.8 M and takes 8192 codes to 8x the grid."""
    from mmpretrain.models.selfsup.cae import DALLEEncoder
    count = (lambda m: sum(p.numel() for p in m.parameters()))
    assert round(count(DALLEEncoder()) / 1e6, 1) == 53.8
    dec = DalleDecoder()
    assert round(count(dec) / 1e6, 1) == 43.8
    with torch.no_grad():
        out = dec(F.one_hot(torch.zeros(1, 2, 3, dtype=torch.long), 8192).permute(0, 3, 1, 2))
    assert out.shape == (1, 6, 16, 24)
