"""What the trainable and the frozen PeCo tokenizer share: the encoder, decoder and quantizer
built from part configs (`build_codec`), and the encode / decode path with its
precision setting."""
from __future__ import annotations

import inspect
import logging
from collections.abc import Callable

import torch
import torch.nn as nn

from ..layers.gumbel_quantizer import GumbelQuantizer
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
MODELS.register_module(module=GumbelQuantizer)  # the dVAE's codes (DALL-E, BEiT)


def arch_parts(encoder: dict | None = None, decoder: dict | None = None,
               quantizer: dict | None = None) -> dict[str, dict]:
    """The architecture as plain part dicts (`DEFAULT_PARTS` for a part not given)."""
    given = dict(encoder=encoder, decoder=decoder, quantizer=quantizer)
    for name, cfg in given.items():
        if cfg is not None and not (isinstance(cfg, dict) and 'type' in cfg):
            raise TypeError(f'{name}={cfg!r}: expected a part config dict(type=..., ...)')
    return {k: dict(v if v is not None else DEFAULT_PARTS[k]) for k, v in given.items()}


def build_codec(parts: dict[str, dict], with_decoder: bool = True,
                part_class: Callable[[str, str], type] | None = None
                ) -> tuple[nn.Module, nn.Module | None, EMAVectorQuantizer]:
    """(encoder, decoder or None, quantizer) from `arch_parts`' dicts, built in that order
    (a seed gives the same weights as ever). The encoder's output and the decoder's input are
    as wide as the codewords: their `code_dims` is the quantizer's `embed_dims`.

    By default each part is built through the registry (a config is code: it may name any
    registered part). With `part_class(slot, name) -> class` (a tokenizer read from a file:
    `stored_parts.stored_class`), each is built by calling the class it gives."""
    code_dims = _codeword_width(parts['quantizer'], part_class)
    built = []
    for name in ('encoder', 'decoder'):
        cfg = dict(parts[name])
        if cfg.setdefault('code_dims', code_dims) != code_dims:
            raise ValueError(f'{name}.code_dims={cfg["code_dims"]} differs from the '
                             f'codebook width quantizer.embed_dims={code_dims}; leave it out')
        built.append(_build_part(name, cfg, part_class)
                     if name == 'encoder' or with_decoder else None)
    return built[0], built[1], _build_part('quantizer', parts['quantizer'], part_class)


def _build_part(slot: str, cfg: dict, part_class: Callable[[str, str], type] | None
                ) -> nn.Module:
    if part_class is None:
        return MODELS.build(cfg)
    return part_class(slot, cfg['type'])(**{k: v for k, v in cfg.items() if k != 'type'})


def _codeword_width(quantizer: dict, part_class: Callable[[str, str], type] | None) -> int:
    """The `embed_dims` a quantizer config builds (its class's default when not given)."""
    cls = (MODELS.get(quantizer['type']) if part_class is None
           else part_class('quantizer', quantizer['type']))
    if cls is None:
        raise KeyError(f'quantizer type {quantizer["type"]!r} is not registered')
    return int(quantizer.get('embed_dims',
                             inspect.signature(cls).parameters['embed_dims'].default))


SETTINGS = (False, True, 'auto')  # of encode_bf16, channels_last and compile_encoder
ENCODE_PRECISIONS = SETTINGS


def check_setting(name: str, value) -> bool | str:
    """A False / True / 'auto' setting (`encode_bf16`, `channels_last`, `compile_encoder`)
    itself, or a ValueError naming it and the allowed values."""
    if not (isinstance(value, bool) or value == 'auto'):
        raise ValueError(f'{name}={value!r}; expected one of {SETTINGS}')
    return value


def check_encode_bf16(encode_bf16) -> bool | str:
    """`encode_bf16` itself, or a ValueError naming the allowed settings."""
    return check_setting('encode_bf16', encode_bf16)


def bf16_targets(encode_bf16: bool | str, device: torch.device) -> bool:
    """Whether `encode` runs its encoder in bf16 on `device` for an `encode_bf16` setting
    (False / True / 'auto': bf16 only where `device` computes it natively); the setting was
    checked when the tokenizer was built (`check_encode_bf16`)."""
    return native_bf16(device) if encode_bf16 == 'auto' else bool(encode_bf16)


def encode_memory_format(channels_last: bool | str, device: torch.device | str
                         ) -> torch.memory_format:
    """The memory format `encode` runs the encoder in on `device`: channels-last for True,
    contiguous for False; 'auto' picks by device: channels-last on a CPU (oneDNN's faster
    layout for these convolutions), contiguous on CUDA (cuDNN's faster one, docs/benchmarks.md)."""
    if channels_last == 'auto':
        channels_last = torch.device(device).type == 'cpu'
    return torch.channels_last if channels_last else torch.contiguous_format


def compiles_encoder(compile_encoder: bool | str, device: torch.device | str) -> bool:
    """Whether `encode` runs the encoder through torch.compile on `device`: 'auto' on CUDA only
    (on a CPU compiling costs more than it saves at a target's batch)."""
    if compile_encoder == 'auto':
        return torch.device(device).type == 'cuda'
    return bool(compile_encoder)


class TokenizerEncoding:
    """`encode` / `decode` over `self.encoder`, `self.quantizer` and `self.decoder` (or None),
    shared by `PeCoTokenizer` and `FrozenPeCoTokenizer`."""
    encoder: nn.Module
    decoder: nn.Module | None
    quantizer: EMAVectorQuantizer
    channels_last: bool | str
    compile_encoder: bool | str = False
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
        Runs under inference mode, in the memory format `channels_last` gives for the
        images' device (`encode_memory_format`), through torch.compile where
        `compile_encoder` says (`compiles_encoder`; eager after a failed compile). The
        encoder runs in bf16 autocast when `bf16` is True (on the images' device, CPU
        included), in fp32 when False, and by default as `encode_bf16` says
        (`bf16_targets`); the nearest-codeword search is fp32 always. The codes returned are
        ordinary tensors, usable as cross-entropy targets."""
        self._check_size(img)
        img = to_three_channels(img)
        use_bf16 = bf16_targets(self.encode_bf16, img.device) if bf16 is None else bool(bf16)
        layout = self.encoder_layout(img.device)
        with torch.inference_mode():
            img = img.contiguous(memory_format=layout)
            with torch.autocast(img.device.type, dtype=torch.bfloat16, enabled=use_bf16):
                z = self.run_encoder(img)  # (B, D, h, w)
            codes = self.quantizer.encode(z)  # (B, h, w)
        return codes.clone()  # leave inference mode: targets may be saved for backward

    def encoder_layout(self, device: torch.device) -> torch.memory_format:
        """The memory format for `device`; the encoder's weights are put in it the first time
        it differs from the one they are in (e.g. an 'auto' tokenizer built on the CPU and
        moved to CUDA), once, not at every call."""
        layout = encode_memory_format(self.channels_last, device)
        if self.__dict__.get('_encoder_layout') != layout:
            self.encoder.to(memory_format=layout)
            self.__dict__['_encoder_layout'] = layout
        return layout

    def run_encoder(self, img: torch.Tensor) -> torch.Tensor:
        """The encoder on `img`, compiled where `compiles_encoder` says. A compile that fails
        (no compiler, an unsupported op) logs one line and leaves the encoder eager for good:
        the codes are the same either way."""
        if self.__dict__.get('_compile_failed') or \
                not compiles_encoder(self.compile_encoder, img.device):
            return self.encoder(img)
        compiled = self.__dict__.get('_compiled_encoder')
        if compiled is None:  # kept out of the module tree: no state-dict keys of its own
            compiled = self.__dict__['_compiled_encoder'] = torch.compile(self.encoder)
        try:
            return compiled(img)
        except Exception as err:  # any compile failure: fall back, do not fail training
            from mmengine.logging import print_log
            self.__dict__['_compile_failed'] = True
            reason = (str(err).strip().splitlines() or [''])[0][:200]
            print_log(f'{type(self).__name__}: torch.compile of the target encoder failed '
                      f'({type(err).__name__}: {reason}); encoding in eager mode',
                      logger='current', level=logging.WARNING)
            return self.encoder(img)

    def __getstate__(self) -> dict:
        """Copies and pickles leave the compiled encoder behind (it is rebuilt on use)."""
        state = super().__getstate__()  # type: ignore[misc]  (nn.Module's)
        state.pop('_compiled_encoder', None)
        return state

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
