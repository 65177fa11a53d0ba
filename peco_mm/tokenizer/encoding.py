"""What the trainable and the frozen PeCo tokenizer share: the encoder / decoder pair built
from the architecture arguments (`ARCH_KEYS`), and the encode / decode path with its
precision setting."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn

from ..layers.quantizer import EMAVectorQuantizer
from ..utils.precision import native_bf16
from .cnn import CNNDecoder, CNNEncoder
from .preprocessor import to_three_channels

ENCODER_TYPES = ('cnn', 'vit')
# the PeCoTokenizer arguments that fix the encoder / decoder / codebook shapes: what a
# checkpoint's stored config must say (and all a frozen tokenizer takes from it)
ARCH_KEYS = ('encoder_type', 'base_channels', 'channel_mult', 'num_res_blocks',
             'decoder_base_channels', 'decoder_num_res_blocks', 'dropout', 'vit_cfg',
             'decoder_vit_cfg', 'num_embeddings', 'embed_dims')


def build_codec(embed_dims: int, encoder_type: str = 'cnn', base_channels: int = 64,
                channel_mult: Sequence[int] = (1, 2, 4, 8, 8), num_res_blocks: int = 2,
                decoder_base_channels: int | None = None,
                decoder_num_res_blocks: int | None = None, dropout: float = 0.0,
                vit_cfg: dict | None = None, decoder_vit_cfg: dict | None = None,
                with_decoder: bool = True) -> tuple[nn.Module, nn.Module | None]:
    """(encoder, decoder or None) of a tokenizer; arguments as `PeCoTokenizer`'s."""
    if encoder_type not in ENCODER_TYPES:
        raise ValueError(f'encoder_type={encoder_type!r}; allowed: {ENCODER_TYPES}')
    decoder = None
    if encoder_type == 'cnn':
        encoder = CNNEncoder(3, embed_dims, base_channels, channel_mult, num_res_blocks,
                             dropout)
        if with_decoder:
            decoder = CNNDecoder(embed_dims, 3, decoder_base_channels or base_channels,
                                 channel_mult, decoder_num_res_blocks or num_res_blocks,
                                 dropout)
    else:
        from .vit_codec import ViTDecoder, ViTEncoder
        encoder = ViTEncoder(embed_dims, **(vit_cfg or {}))
        if with_decoder:
            decoder = ViTDecoder(embed_dims, **(decoder_vit_cfg or vit_cfg or {}))
    return encoder, decoder


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
