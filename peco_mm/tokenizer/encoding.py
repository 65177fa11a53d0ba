"""What the trainable and the frozen PeCo tokenizer share: the encoder, decoder and quantizer
built from registered part configs (`build_codec`), and the encode / decode path with its
precision setting."""
from __future__ import annotations

import inspect

import torch
import torch.nn as nn

from ..layers.quantizer import EMAVectorQuantizer
from ..registry import MODELS
from ..utils.precision import native_bf16
from .preprocessor import to_three_channels

# the parts a tokenizer is built from when its config names none: the paper's 16x CNN
# encoder / decoder (each class's defaults) and the EMA codebook, K = 8192, D = 256
DEFAULT_PARTS = dict(encoder=dict(type='CNNEncoder'), decoder=dict(type='CNNDecoder'),
                     quantizer=dict(type='EMAVectorQuantizer'))
ARCH_PARTS = tuple(DEFAULT_PARTS)  # what fixes the shapes: stored in every checkpoint

MODELS.register_module(module=EMAVectorQuantizer)  # layers/ knows no registry


def arch_parts(encoder: dict | None = None, decoder: dict | None = None,
               quantizer: dict | None = None) -> dict[str, dict]:
    """The architecture as plain part dicts (`DEFAULT_PARTS` for a part not given)."""
    given = dict(encoder=encoder, decoder=decoder, quantizer=quantizer)
    for name, cfg in given.items():
        if cfg is not None and not (isinstance(cfg, dict) and 'type' in cfg):
            raise TypeError(f'{name}={cfg!r}: expected a part config dict(type=..., ...)')
    return {k: dict(v if v is not None else DEFAULT_PARTS[k]) for k, v in given.items()}


def build_codec(parts: dict[str, dict], with_decoder: bool = True
                ) -> tuple[nn.Module, nn.Module | None, EMAVectorQuantizer]:
    """(encoder, decoder or None, quantizer) from `arch_parts`' dicts, built in that order
    (a seed gives the same weights as ever). The encoder's output and the decoder's input are
    as wide as the codewords: their `code_dims` is the quantizer's `embed_dims`."""
    code_dims = _codeword_width(parts['quantizer'])
    built = []
    for name in ('encoder', 'decoder'):
        cfg = dict(parts[name])
        if cfg.setdefault('code_dims', code_dims) != code_dims:
            raise ValueError(f'{name}.code_dims={cfg["code_dims"]} differs from the '
                             f'codebook width quantizer.embed_dims={code_dims}; leave it out')
        built.append(MODELS.build(cfg) if name == 'encoder' or with_decoder else None)
    return built[0], built[1], MODELS.build(parts['quantizer'])


def _codeword_width(quantizer: dict) -> int:
    """The `embed_dims` a quantizer config builds (its class's default when not given)."""
    cls = MODELS.get(quantizer['type'])
    if cls is None:
        raise KeyError(f'quantizer type {quantizer["type"]!r} is not registered')
    return int(quantizer.get('embed_dims',
                             inspect.signature(cls).parameters['embed_dims'].default))


ENCODE_PRECISIONS = (False, True, 'auto')


def check_encode_bf16(encode_bf16) -> bool | str:
    """`encode_bf16` itself, or a ValueError naming the allowed settings."""
    if not (isinstance(encode_bf16, bool) or encode_bf16 == 'auto'):
        raise ValueError(f'encode_bf16={encode_bf16!r}; expected one of {ENCODE_PRECISIONS}')
    return encode_bf16


def bf16_targets(encode_bf16: bool | str, device: torch.device) -> bool:
    """Whether `encode` runs its encoder in bf16 on `device` for an `encode_bf16` setting
    (False / True / 'auto': bf16 only where `device` computes it natively); the setting was
    checked when the tokenizer was built (`check_encode_bf16`)."""
    return native_bf16(device) if encode_bf16 == 'auto' else bool(encode_bf16)


class TokenizerEncoding:
    """`encode` / `decode` over `self.encoder`, `self.quantizer` and `self.decoder` (or None),
    shared by `PeCoTokenizer` and `FrozenPeCoTokenizer`."""
    encoder: nn.Module
    decoder: nn.Module | None
    quantizer: EMAVectorQuantizer
    channels_last: bool
    encode_bf16: bool | str

    @property
    def num_embeddings(self) -> int:
        return self.quantizer.num_embeddings

    @property
    def embed_dims(self) -> int:
        return self.quantizer.embed_dims

    @property
    def downsample(self) -> int:
        return self.encoder.downsample

    def encode(self, img: torch.Tensor, bf16: bool | None = None) -> torch.Tensor:
        """(B, 3, H, W) images in [-1, 1] -> (B, H/s, W/s) long codes, s = self.downsample.
        Runs under inference mode, channels-last when set. The encoder runs in bf16 autocast
        when `bf16` is True (on the images' device, CPU included), in fp32 when False, and by
        default as `encode_bf16` says (`bf16_targets`); the nearest-codeword search is fp32
        always. The codes returned are ordinary tensors, usable as cross-entropy targets."""
        self._check_size(img)
        img = to_three_channels(img)
        use_bf16 = bf16_targets(self.encode_bf16, img.device) if bf16 is None else bool(bf16)
        with torch.inference_mode():
            if self.channels_last:
                img = img.contiguous(memory_format=torch.channels_last)
            with torch.autocast(img.device.type, dtype=torch.bfloat16, enabled=use_bf16):
                z = self.encoder(img)  # (B, D, h, w)
            codes = self.quantizer.encode(z)  # (B, h, w)
        return codes.clone()  # leave inference mode: targets may be saved for backward

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """(B, h, w) codes -> (B, 3, h·s, w·s) images in [-1, 1]."""
        if self.decoder is None:
            raise RuntimeError(f'this {type(self).__name__} was built with with_decoder=False; '
                               'load it with with_decoder=True to decode')
        return self.decoder(self.codewords(codes)).clamp(-1, 1)

    def codewords(self, codes: torch.Tensor) -> torch.Tensor:
        """(B, h, w) codes -> (B, D, h, w) quantized codewords."""
        return self.quantizer.codes_to_vectors(codes)

    def _check_size(self, img: torch.Tensor) -> None:
        if img.dim() != 4:
            raise ValueError(f'expected images (B, C, H, W), got shape {tuple(img.shape)}')
        H, W = img.shape[-2:]
        s = self.downsample
        if H % s or W % s:
            raise ValueError(f'image size {H}x{W} is not a multiple of the tokenizer\'s '
                             f'downsampling factor {s}; resize or crop to a multiple of {s}')
