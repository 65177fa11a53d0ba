"""`FrozenPeCoTokenizer`, the target generator of masked image modeling, and how it reads a
tokenizer's architecture from a checkpoint: the part configs tools/train.py stores as plain
data, or, for files written before parts, the old flat arguments (stored as data, in the
config text mmengine stores, read as data, or read off the shapes of the weights)."""
from __future__ import annotations

import os.path as osp

import torch
import torch.nn as nn

from ..checkpoint import StoredConfigError, is_url, parse_config_text, tokenizer_state_dict
from ..registry import MODELS
from .encoding import (ARCH_PARTS, TokenizerEncoding, arch_parts, build_codec, check_encode_bf16,
                       check_setting)
from .legacy import FLAT_ARCH_KEYS, check_flat_keys, parts_from_flat
from .stored_parts import STORED_PARTS, check_stored_flat, check_stored_parts, stored_class
from .tokenizer import load_tokenizer_state, read_tokenizer_checkpoint

TARGET_GENERATOR_KEY = 'model.target_generator.checkpoint'


@MODELS.register_module()
class FrozenPeCoTokenizer(TokenizerEncoding, nn.Module):
    """The target generator of masked image modeling: a trained tokenizer's encoder and
    codebook (decoder only with with_decoder=True), frozen, always in eval mode, without a
    data preprocessor (the MIM data preprocessor prepares its [-1, 1] view).

    The architecture is read from the checkpoint (the part configs tools/train.py stores in
    it; for older files, see `checkpoint_parts`), so a pretraining config only names the file:

        target_generator=dict(type='FrozenPeCoTokenizer', checkpoint='tokenizer.pth')

    Args:
        checkpoint: a tokenizer checkpoint written by tools/train.py, or a PeCo pretraining
            checkpoint (its `target_generator.*` weights).
        with_decoder: also load the decoder (for visualising codes).
        channels_last, compile_encoder, encode_bf16: as `PeCoTokenizer`'s `encode`; here
            the first two default to 'auto' (channels-last on a CPU, contiguous and compiled
            on CUDA).
        config_key: the config key that gives `checkpoint`, named when the file is missing
            (the MIM target generator's by default; wrappers pass their own).
        encoder, decoder, quantizer: part configs that replace the checkpoint's (a dict
            without `type`, or with the same type, updates it), e.g. for a ViT-encoder file
            that stores no architecture. A file names its parts only from the closed schema
            `stored_parts.STORED_PARTS`; a part of another class (one of your own,
            registered) is given here, and the file's part of that slot is then not read.
        **flat_arch: the old flat architecture arguments (`encoder_type`, `base_channels`,
            ...; see `peco_mm.tokenizer.legacy`), for files written before parts.
    """

    def __init__(self, checkpoint: str | None = None, with_decoder: bool = False,
                 channels_last: bool | str = 'auto', compile_encoder: bool | str = 'auto',
                 encode_bf16: bool | str = False,
                 config_key: str = TARGET_GENERATOR_KEY, encoder: dict | None = None,
                 decoder: dict | None = None, quantizer: dict | None = None,
                 **flat_arch) -> None:
        super().__init__()
        self.channels_last = check_setting('channels_last', channels_last)
        self.compile_encoder = check_setting('compile_encoder', compile_encoder)
        check_flat_keys(flat_arch, 'FrozenPeCoTokenizer', FLAT_ARCH_KEYS, ARCH_PARTS)
        if not checkpoint or not (is_url(checkpoint) or osp.isfile(str(checkpoint))):
            raise FileNotFoundError(
                f'FrozenPeCoTokenizer: tokenizer checkpoint {checkpoint!r} not found; set '
                f'{config_key}=PATH to a tokenizer trained with tools/train.py '
                '(configs/peco/tokenizer_*.py)')
        ckpt = read_tokenizer_checkpoint(checkpoint)
        overrides = dict(encoder=encoder, decoder=decoder, quantizer=quantizer)
        self.arch_parts = checkpoint_parts(ckpt, checkpoint, overrides, flat_arch)
        self.checkpoint = str(checkpoint)
        self.encode_bf16 = check_encode_bf16(encode_bf16)
        # each part built by calling its class: the schema's, or a class the caller named
        part_class = _part_classes(overrides)
        # the codebook is read from the file: the quantizer's frozen arguments (the EMA
        # codebook's: no data init, no restarts)
        frozen_quantizer = self.arch_parts['quantizer']
        frozen_quantizer = dict(frozen_quantizer, **getattr(
            part_class('quantizer', frozen_quantizer['type']), 'FROZEN_ARGS', {}))
        self.encoder, self.decoder, self.quantizer = build_codec(
            {**self.arch_parts, 'quantizer': frozen_quantizer}, with_decoder, part_class)
        load_tokenizer_state(self, self.checkpoint, ckpt)
        self.encoder_layout(next(self.encoder.parameters()).device)  # where built
        self.requires_grad_(False)
        super().train(False)

    def train(self, mode: bool = True) -> 'FrozenPeCoTokenizer':
        return super().train(False)  # always eval: GroupNorm / codebook stay as trained

    def init_weights(self) -> None:
        """Nothing to do: the weights were read from the checkpoint when it was built."""

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.encode(img)


def checkpoint_parts(ckpt: dict, path: str, overrides: dict | None = None,
                     flat_overrides: dict | None = None) -> dict[str, dict]:
    """The architecture (encoder, decoder and quantizer configs) of a tokenizer checkpoint:
    the part configs `ArchitectureMetaHook` stores (`meta.tokenizer_parts`); for a file
    written before them, its old flat arguments (`flat_checkpoint_arch`) translated, under the
    part configs its stored config text names; then `overrides` (part configs) applied.
    What is read from the file is checked against the closed schema first
    (`stored_parts.check_stored_parts` / `check_stored_flat`), before anything is built; the
    part of a slot that `overrides` gives as a class outside the schema is not read."""
    own = _own_classes(overrides)
    meta = _meta(ckpt)
    if 'tokenizer_parts' in meta:
        if flat_overrides:
            raise TypeError(f'{path} stores its tokenizer as part configs; replace them with '
                            f'encoder=, decoder=, quantizer=, not {sorted(flat_overrides)}')
        stored = meta['tokenizer_parts']
        if isinstance(stored, dict):
            stored = {k: v for k, v in stored.items() if k not in own}
        check_stored_parts(stored, f'{path} meta.tokenizer_parts')
        parts = stored
    else:
        flat = meta.get('tokenizer_arch')
        if flat is not None:
            flat = _arch_keys(flat, f'{path} meta.tokenizer_arch', own)
        model = flat if flat is not None else _tokenizer_cfg(ckpt, path, own)
        given = any(v is not None for v in (overrides or {}).values())
        parts = parts_from_flat(flat_checkpoint_arch(ckpt, path, model, flat_overrides, given))
        parts.update({k: v for k, v in (model or {}).items() if k in ARCH_PARTS})
    parts = arch_parts(*(parts.get(k) for k in ARCH_PARTS))
    return {k: _override(parts[k], (overrides or {}).get(k)) for k in ARCH_PARTS}


def _own_classes(overrides: dict | None) -> set[str]:
    """The slots `overrides` gives as a class outside the schema (the caller's own)."""
    return {k for k, v in (overrides or {}).items()
            if isinstance(v, dict) and 'type' in v and v['type'] not in STORED_PARTS[k]}


def _part_classes(overrides: dict):
    """`part_class(slot, name)` for `build_codec`: the schema's class of a part read from
    the file, the registered class of a part the caller gave (`_own_classes`)."""
    own = _own_classes(overrides)

    def part_class(slot: str, name: str) -> type:
        if slot in own and name == overrides[slot]['type']:
            cls = MODELS.get(name)
            if cls is None:
                raise KeyError(f'FrozenPeCoTokenizer: {slot}.type {name!r} is not registered')
            return cls
        return stored_class(slot, name)
    return part_class


def _arch_keys(data, where: str, own: set[str]) -> dict:
    """The architecture keys (old flat arguments, part configs but `own`) of `data` read
    from a file, checked against the schema (`check_stored_flat`)."""
    if not isinstance(data, dict):
        raise StoredConfigError(f'{where}: a {type(data).__name__}, not a dict of tokenizer '
                                'arguments')
    arch = {k: v for k, v in data.items()
            if isinstance(k, str) and k in FLAT_ARCH_KEYS + ARCH_PARTS and k not in own
            and not (k in ARCH_PARTS and v is None)}
    check_stored_flat(arch, where)
    return arch


def _override(part: dict, override: dict | None) -> dict:
    if override is None:
        return part
    if override.get('type', part['type']) != part['type']:
        return dict(override)
    return {**part, **override}


def flat_checkpoint_arch(ckpt: dict, path: str, model: dict | None,
                         overrides: dict | None = None, parts_given: bool = False) -> dict:
    """The old flat architecture of a file written before parts, from the first source that
    has it: `overrides`, then `model` (the plain dict `meta.tokenizer_arch`, or the config
    mmengine's Runner stores as text in `meta.cfg`, read as data: a tokenizer run's `model`,
    or the `target_generator` of a pretraining run that spelled it out), then the shapes of a
    CNN encoder and codebook in the state dict (e.g. a pretraining checkpoint whose target
    generator was a `FrozenPeCoTokenizer`); the rest are the old defaults."""
    overrides = dict(overrides or {})
    shapes = infer_cnn_arch(tokenizer_state_dict(ckpt))
    if model is None and shapes is None and not overrides and not parts_given:
        raise ValueError(
            f'{path}: the checkpoint stores no tokenizer architecture (meta.tokenizer_parts '
            'or meta.cfg) and holds no CNN tokenizer encoder + codebook, so the architecture '
            'is unknown. Use a checkpoint written by tools/train.py, or pass the part configs '
            '(encoder=, decoder=, quantizer=) next to the checkpoint')
    return {**(shapes or {}), **{k: v for k, v in (model or {}).items() if k in FLAT_ARCH_KEYS},
            **overrides}


def _tokenizer_cfg(ckpt: dict, path: str, own: set[str] = frozenset()) -> dict | None:
    """The architecture keys (old flat arguments, part configs) of the PeCoTokenizer config
    in the checkpoint's stored config text, if any, read as data (`parse_config_text`:
    nothing in it is run), checked against the schema (`_arch_keys`)."""
    cfg_text = _meta(ckpt).get('cfg')
    if not cfg_text:
        return None
    model = parse_config_text(cfg_text, f'{path} meta.cfg').get('model') or {}
    if not isinstance(model, dict):
        raise ValueError(f'{path} meta.cfg: model is a {type(model).__name__}, not a dict')
    target = model.get('target_generator')
    if model.get('type') in (None, 'PeCoTokenizer'):
        return _arch_keys(model, f'{path} meta.cfg model', own)
    if isinstance(target, dict) and target.get('type') in ('PeCoTokenizer',
                                                           'FrozenPeCoTokenizer'):
        # (a frozen one: the rest from shapes)
        return _arch_keys(target, f'{path} meta.cfg model.target_generator', own)
    raise ValueError(f'{path}: the config stored in this checkpoint builds a '
                     f'{str(model.get("type"))[:80]!r} without a PeCo tokenizer: give a '
                     f'tokenizer checkpoint ({TARGET_GENERATOR_KEY})')


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
