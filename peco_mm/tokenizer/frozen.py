"""`FrozenPeCoTokenizer`, the target generator of masked image modeling, and how it reads a
tokenizer's architecture from a checkpoint: the plain dict tools/train.py stores, the config
text mmengine stores (read as data), or the shapes of the weights for older files."""
from __future__ import annotations

import inspect
import os.path as osp

import torch
import torch.nn as nn

from ..checkpoint import is_url, parse_config_text, tokenizer_state_dict
from ..layers.quantizer import CODEBOOK_SIZE, EMAVectorQuantizer
from ..registry import MODELS
from .encoding import ARCH_KEYS, TokenizerEncoding, build_codec, check_encode_bf16
from .tokenizer import PeCoTokenizer, load_tokenizer_state, read_tokenizer_checkpoint

TARGET_GENERATOR_KEY = 'model.target_generator.checkpoint'


@MODELS.register_module()
class FrozenPeCoTokenizer(TokenizerEncoding, nn.Module):
    """The target generator of masked image modeling: a trained tokenizer's encoder and
    codebook (decoder only with with_decoder=True), frozen, always in eval mode, without a
    data preprocessor (the MIM data preprocessor prepares its [-1, 1] view).

    The architecture is read from the checkpoint (the config tools/train.py stores in it, or
    the shapes of a CNN encoder and codebook, see `checkpoint_arch`), so a pretraining config
    only names the file:

        target_generator=dict(type='FrozenPeCoTokenizer', checkpoint='tokenizer.pth')

    Args:
        checkpoint: a tokenizer checkpoint written by tools/train.py, or a PeCo pretraining
            checkpoint (its `target_generator.*` weights).
        with_decoder: also load the decoder (for visualising codes).
        channels_last, encode_bf16: as `PeCoTokenizer`'s `encode`.
        config_key: the config key that gives `checkpoint`, named when the file is missing
            (the MIM target generator's by default; wrappers pass their own).
        **arch: architecture arguments (`ARCH_KEYS`) that replace the checkpoint's, e.g. for a
            ViT-encoder file that stores no config.
    """

    def __init__(self, checkpoint: str | None = None, with_decoder: bool = False,
                 channels_last: bool = True, encode_bf16: bool | str = False,
                 config_key: str = TARGET_GENERATOR_KEY, **arch) -> None:
        super().__init__()
        unknown = sorted(set(arch) - set(ARCH_KEYS))
        if unknown:
            raise TypeError(f'FrozenPeCoTokenizer: unknown arguments {unknown}; the '
                            f'architecture comes from the checkpoint, and may be overridden '
                            f'with {", ".join(ARCH_KEYS)}')
        if not checkpoint or not (is_url(checkpoint) or osp.isfile(str(checkpoint))):
            raise FileNotFoundError(
                f'FrozenPeCoTokenizer: tokenizer checkpoint {checkpoint!r} not found; set '
                f'{config_key}=PATH to a tokenizer trained with tools/train.py '
                '(configs/peco/tokenizer_*.py)')
        ckpt = read_tokenizer_checkpoint(checkpoint)
        arch = checkpoint_arch(ckpt, checkpoint, arch)
        self.arch_args = arch
        self.checkpoint = str(checkpoint)
        self.channels_last = channels_last
        self.encode_bf16 = check_encode_bf16(encode_bf16)
        self.encoder, self.decoder = build_codec(with_decoder=with_decoder, **_codec_args(arch))
        self.quantizer = EMAVectorQuantizer(arch.get('num_embeddings', CODEBOOK_SIZE),
                                            arch.get('embed_dims', 256), init='random',
                                            restart_threshold=0.0)
        load_tokenizer_state(self, self.checkpoint, ckpt)
        if channels_last:
            self.encoder.to(memory_format=torch.channels_last)
        self.requires_grad_(False)
        super().train(False)

    def train(self, mode: bool = True) -> 'FrozenPeCoTokenizer':
        return super().train(False)  # always eval: GroupNorm / codebook stay as trained

    def init_weights(self) -> None:
        """Nothing to do: the weights were read from the checkpoint when it was built."""

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.encode(img)


def checkpoint_arch(ckpt: dict, path: str, overrides: dict | None = None) -> dict:
    """The tokenizer architecture (`ARCH_KEYS`) of a checkpoint, from the first source that
    has it: `overrides`, then the plain dict `meta.tokenizer_arch` (written by
    `ArchitectureMetaHook` since checkpoints stopped relying on config text), then the config
    mmengine's Runner stores as text in `meta.cfg`, read as data (a tokenizer run's `model`,
    or the `target_generator` of a pretraining run that spelled it out), then the shapes of a
    CNN encoder and codebook in the state dict (e.g. a pretraining checkpoint whose target
    generator was a `FrozenPeCoTokenizer`), then `PeCoTokenizer`'s defaults."""
    overrides = dict(overrides or {})
    stored = _meta(ckpt).get('tokenizer_arch')
    model = stored if isinstance(stored, dict) else _tokenizer_cfg(ckpt, path)
    shapes = infer_cnn_arch(tokenizer_state_dict(ckpt))
    if model is None and shapes is None and not overrides:
        raise ValueError(
            f'{path}: the checkpoint stores no tokenizer architecture (meta.tokenizer_arch or '
            'meta.cfg) and holds no CNN tokenizer encoder + codebook, so the architecture is '
            'unknown. Use a checkpoint written by tools/train.py, or pass the architecture '
            f'({", ".join(ARCH_KEYS)}) next to the checkpoint')
    defaults = {k: p.default for k, p in inspect.signature(PeCoTokenizer).parameters.items()
                if k in ARCH_KEYS}
    return {**defaults, **(shapes or {}),
            **{k: v for k, v in (model or {}).items() if k in ARCH_KEYS}, **overrides}


def _tokenizer_cfg(ckpt: dict, path: str) -> dict | None:
    """The PeCoTokenizer config in the checkpoint's stored config text, if any, read as data
    (`parse_config_text`: nothing in it is run)."""
    cfg_text = _meta(ckpt).get('cfg')
    if not cfg_text:
        return None
    model = parse_config_text(cfg_text, f'{path} meta.cfg').get('model') or {}
    if not isinstance(model, dict):
        raise ValueError(f'{path} meta.cfg: model is a {type(model).__name__}, not a dict')
    if model.get('type') in (None, 'PeCoTokenizer'):
        return model
    target = model.get('target_generator')
    if isinstance(target, dict) and target.get('type') == 'PeCoTokenizer':
        return target
    if isinstance(target, dict) and target.get('type') == 'FrozenPeCoTokenizer':
        return {k: v for k, v in target.items() if k in ARCH_KEYS}  # the rest from shapes
    raise ValueError(f'{path}: the config stored in this checkpoint builds a '
                     f'{model.get("type")!r} without a PeCo tokenizer: give a tokenizer '
                     f'checkpoint ({TARGET_GENERATOR_KEY})')


def _meta(ckpt: dict) -> dict:
    meta = ckpt.get('meta')
    return meta if isinstance(meta, dict) else {}


def infer_cnn_arch(sd: dict) -> dict | None:
    """CNN encoder + codebook arguments read off the weights' shapes (None when the state
    dict holds no CNN tokenizer encoder): base_channels from the first conv, channel_mult
    from the first residual block of each stage, num_res_blocks from stage 0, K and D from
    the codebook."""
    if 'encoder.conv_in.weight' not in sd or 'quantizer.embedding' not in sd:
        return None
    base = sd['encoder.conv_in.weight'].shape[0]
    blocks: dict[int, list[int]] = {}  # stage -> indices of its residual blocks
    for k in sd:
        parts = k.split('.')
        if k.startswith('encoder.stages.') and parts[4:] == ['conv1', 'weight']:
            blocks.setdefault(int(parts[2]), []).append(int(parts[3]))
    mult = tuple(sd[f'encoder.stages.{i}.0.conv1.weight'].shape[0] // base
                 for i in sorted(blocks))
    K, D = sd['quantizer.embedding'].shape
    return dict(encoder_type='cnn', base_channels=base, channel_mult=mult,
                num_res_blocks=len(blocks[0]), num_embeddings=K, embed_dims=D)


def _codec_args(arch: dict) -> dict:
    return {k: (tuple(v) if k == 'channel_mult' else v) for k, v in arch.items()
            if k != 'num_embeddings'}
