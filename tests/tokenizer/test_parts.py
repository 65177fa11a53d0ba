"""The tokenizer built from registered parts: a new architecture is one registered encoder /
decoder pair plus a config; checkpoints store the part configs and the frozen tokenizer
rebuilds them (peco_mm's own parts from the file alone, one's own given by the caller); the
old flat arguments give the same model."""
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from mmengine.config import Config

from peco_mm.checkpoint import read_checkpoint
from peco_mm.registry import MODELS
from peco_mm.tokenizer import FrozenPeCoTokenizer, PeCoTokenizer, cnn_parts

QUANTIZER = dict(type='EMAVectorQuantizer', num_embeddings=16, embed_dims=8, decay=0.9)


@MODELS.register_module(name='PatchConvEncoderForTest', force=True)
class PatchConvEncoder(nn.Module):
    """A whole architecture in ten lines: one strided conv to the codeword width."""

    def __init__(self, code_dims: int, patch: int = 4) -> None:
        super().__init__()
        self.downsample = patch
        self.proj = nn.Conv2d(3, code_dims, patch, stride=patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)  # (B, D, H/p, W/p)


@MODELS.register_module(name='PatchConvDecoderForTest', force=True)
class PatchConvDecoder(nn.Module):
    def __init__(self, code_dims: int, patch: int = 4) -> None:
        super().__init__()
        self.proj = nn.ConvTranspose2d(code_dims, 3, patch, stride=patch)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.proj(z)  # (B, 3, H, W)


def _save(tok: PeCoTokenizer, path, model_cfg: dict) -> str:
    """As tools/train.py saves it: state dict and `ArchitectureMetaHook`'s meta."""
    from peco_mm.engine.hooks.arch_meta import ArchitectureMetaHook
    ckpt = {'state_dict': tok.state_dict()}
    runner = SimpleNamespace(model=tok, cfg=Config(dict(model=model_cfg)))
    ArchitectureMetaHook().before_save_checkpoint(runner, ckpt)
    torch.save(ckpt, path)
    return str(path)


def test_a_new_architecture_is_a_registered_pair_and_a_config(tmp_path):
    cfg = dict(type='PeCoTokenizer', encoder=dict(type='PatchConvEncoderForTest', patch=4),
               decoder=dict(type='PatchConvDecoderForTest', patch=4), quantizer=QUANTIZER,
               perceptual_weight=0.0)
    torch.manual_seed(0)
    tok = MODELS.build(cfg)
    assert tok.downsample == 4 and tok.encoder.proj.out_channels == 8  # code_dims = D
    x = torch.rand(6, 3, 16, 16) * 2 - 1
    losses = tok(x, mode='loss')  # initialises the codebook from data, then one EMA step
    assert torch.isfinite(losses['loss_pixel']) and losses['loss_pixel'] > 0
    path = _save(tok, tmp_path / 'tok.pth', cfg)
    stored = read_checkpoint(path)['meta']['tokenizer_parts']
    assert stored['encoder'] == dict(type='PatchConvEncoderForTest', patch=4)
    assert stored['quantizer'] == QUANTIZER
    # a file names its parts from the closed schema only: a class of one's own is given by
    # the caller (a config is code), never read from the file
    with pytest.raises(ValueError, match=r"tok\.pth meta\.tokenizer_parts\.encoder\.type: "
                       r"'PatchConvEncoderForTest' is not a part a checkpoint may rebuild as "
                       r'the encoder; allowed: CNNEncoder, ViTEncoder'):
        FrozenPeCoTokenizer(path, with_decoder=True)
    frozen = FrozenPeCoTokenizer(path, with_decoder=True, encoder=cfg['encoder'],
                                 decoder=cfg['decoder'])
    assert isinstance(frozen.encoder, PatchConvEncoder)
    assert isinstance(frozen.decoder, PatchConvDecoder)
    tok.eval()
    codes = tok.encode(x)
    assert torch.equal(frozen.encode(x), codes)
    assert torch.equal(frozen.decode(codes), tok.decode(codes))


def test_the_shipped_cnn_round_trips_through_its_stored_parts(tmp_path):
    parts = cnn_parts(8, (1, 2, 2), 1, **{k: v for k, v in QUANTIZER.items() if k != 'type'})
    parts['decoder']['base_channels'] = 4  # a decoder narrower than the encoder
    torch.manual_seed(0)
    tok = PeCoTokenizer(**parts, perceptual_weight=0.0, channels_last=False)
    tok(torch.rand(4, 3, 16, 16) * 2 - 1, mode='loss')
    path = _save(tok, tmp_path / 'tok.pth', dict(type='PeCoTokenizer', **parts))
    frozen = FrozenPeCoTokenizer(path, with_decoder=True, channels_last=False)
    assert frozen.arch_parts == tok.arch_parts
    assert frozen.decoder.conv_out.in_channels == 4
    x = torch.rand(2, 3, 16, 16) * 2 - 1
    tok.eval()
    assert torch.equal(frozen.encode(x), tok.encode(x))
    # a part override: another codebook size than the file's is refused, naming the file
    with pytest.raises(ValueError, match='tok.pth: shapes differ'):
        FrozenPeCoTokenizer(path, quantizer=dict(num_embeddings=32))
    # the old flat overrides are for old files only
    with pytest.raises(TypeError, match='stores its tokenizer as part configs'):
        FrozenPeCoTokenizer(path, embed_dims=8)


@pytest.mark.parametrize('flat, parts', [
    (dict(base_channels=8, channel_mult=(1, 2, 2), num_res_blocks=1, decoder_base_channels=4,
          decoder_num_res_blocks=2, num_embeddings=16, embed_dims=8, decay=0.9,
          codebook_init='kmeans', restart_threshold=0.05),
     dict(encoder=dict(type='CNNEncoder', base_channels=8, channel_mult=(1, 2, 2),
                       num_res_blocks=1, dropout=0.0),
          decoder=dict(type='CNNDecoder', base_channels=4, channel_mult=(1, 2, 2),
                       num_res_blocks=2, dropout=0.0),
          quantizer=dict(type='EMAVectorQuantizer', num_embeddings=16, embed_dims=8,
                         decay=0.9, init='kmeans', restart_threshold=0.05))),
    (dict(encoder_type='vit', vit_cfg=dict(arch='test', img_size=16, patch_size=4),
          embed_dims=8, num_embeddings=16),
     dict(encoder=dict(type='ViTEncoder', arch='test', img_size=16, patch_size=4),
          decoder=dict(type='ViTDecoder', arch='test', img_size=16, patch_size=4),
          quantizer=dict(type='EMAVectorQuantizer', embed_dims=8, num_embeddings=16))),
], ids=['cnn', 'vit'])
def test_old_flat_arguments_build_the_same_tokenizer_as_their_parts(flat, parts):
    torch.manual_seed(0)
    old = PeCoTokenizer(**flat, perceptual_weight=0.0)
    torch.manual_seed(0)
    new = PeCoTokenizer(**parts, perceptual_weight=0.0)
    assert old.arch_parts == new.arch_parts == parts
    assert old.quantizer.init == new.quantizer.init
    a, b = old.state_dict(), new.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_bad_part_configs_are_refused_by_name():
    with pytest.raises(ValueError, match='encoder, quantizer given both as a part config and '
                                         'as old flat arguments'):
        PeCoTokenizer(encoder=dict(type='CNNEncoder'), quantizer=QUANTIZER, base_channels=8,
                      embed_dims=8, perceptual_weight=0.0)
    # an old argument of one part alone conflicts only with that part
    tok = PeCoTokenizer(encoder=dict(type='CNNEncoder', base_channels=8, channel_mult=(1, 2)),
                        decoder=dict(type='CNNDecoder', base_channels=8, channel_mult=(1, 2)),
                        num_embeddings=16, embed_dims=8, perceptual_weight=0.0)
    assert tok.arch_parts['quantizer'] == dict(type='EMAVectorQuantizer', num_embeddings=16,
                                               embed_dims=8)
    with pytest.raises(TypeError, match="unknown argument 'base_channel' \\(did you mean "
                                        "'base_channels'\\?\\)"):
        PeCoTokenizer(base_channel=8, perceptual_weight=0.0)
    with pytest.raises(ValueError, match='encoder.code_dims=4 differs from the codebook width '
                                         'quantizer.embed_dims=8'):
        PeCoTokenizer(encoder=dict(type='CNNEncoder', code_dims=4), quantizer=QUANTIZER,
                      perceptual_weight=0.0)
    with pytest.raises(TypeError, match="decoder='CNNDecoder': expected a part config"):
        PeCoTokenizer(decoder='CNNDecoder', perceptual_weight=0.0)
    with pytest.raises(KeyError, match='NoSuchEncoder'):
        PeCoTokenizer(encoder=dict(type='NoSuchEncoder'), perceptual_weight=0.0)
