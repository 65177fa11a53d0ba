"""The flat tokenizer arguments of configs and checkpoints written before the tokenizer was
built from registered parts, translated into parts.

Old form (`PeCoTokenizer(encoder_type='cnn', base_channels=64, ..., num_embeddings=8192,
perceptual_cfg=dict(...))`, and `meta.tokenizer_arch` of old checkpoints) -> new form
(`encoder=dict(type='CNNEncoder', ...)`, `decoder=...`, `quantizer=...`, `perceptual=...`,
`discriminator=...`). Nothing else in the package reads the old names; when no old file is
left, this module goes.
"""
from __future__ import annotations

import difflib

from .cnn import cnn_parts

# the old arguments of the encoder / decoder pair
CODEC_KEYS = ('encoder_type', 'base_channels', 'channel_mult', 'num_res_blocks',
              'decoder_base_channels', 'decoder_num_res_blocks', 'dropout', 'vit_cfg',
              'decoder_vit_cfg')
# the old quantizer arguments -> EMAVectorQuantizer's
QUANTIZER_KEYS = {'num_embeddings': 'num_embeddings', 'embed_dims': 'embed_dims',
                  'decay': 'decay', 'beta': 'beta', 'codebook_init': 'init',
                  'kmeans_iters': 'kmeans_iters', 'restart_threshold': 'restart_threshold',
                  'restart_interval': 'restart_interval'}
# the old arguments that fixed the shapes: what an old checkpoint's `meta.tokenizer_arch` holds
FLAT_ARCH_KEYS = CODEC_KEYS + ('num_embeddings', 'embed_dims')
# the old argument dicts of the loss parts
FLAT_PART_KEYS = {'perceptual_cfg': ('perceptual', 'PerceptualLoss'),
                  'discriminator_cfg': ('discriminator', 'PatchDiscriminator')}
FLAT_KEYS = CODEC_KEYS + tuple(QUANTIZER_KEYS) + tuple(FLAT_PART_KEYS) + ('in_channels',)
PART_NAMES = ('encoder', 'decoder', 'quantizer', 'perceptual', 'discriminator')


def check_flat_keys(flat: dict, owner: str, keys: tuple[str, ...] = FLAT_KEYS,
                    parts: tuple[str, ...] = PART_NAMES) -> None:
    """A TypeError naming an argument that is neither one of the `parts` nor an old `keys`."""
    unknown = sorted(set(flat) - set(keys))
    if unknown:
        near = difflib.get_close_matches(unknown[0], parts + keys, n=1)
        raise TypeError(f'{owner}: unknown argument {unknown[0]!r}'
                        + (f' (did you mean {near[0]!r}?)' if near else '')
                        + f'; the architecture is given as parts: {", ".join(parts)}')


def translate_flat_args(flat: dict, parts: dict[str, dict | None]) -> dict[str, dict | None]:
    """`parts` (encoder, decoder, quantizer, perceptual, discriminator: a config or None)
    completed from a config's old flat arguments; a part given both ways is refused."""
    check_flat_keys(flat, 'PeCoTokenizer')
    translated = parts_from_flat(flat)
    both = sorted(k for k in translated if parts.get(k) is not None)
    if both:
        raise ValueError(f'PeCoTokenizer: {", ".join(both)} given both as a part config and '
                         f'as old flat arguments ({", ".join(sorted(flat))}); use the part '
                         'configs only')
    return {**parts, **translated}


def parts_from_flat(flat: dict) -> dict[str, dict]:
    """Old flat arguments -> the parts they describe, only those they mention: the encoder and
    decoder (together), the quantizer, the perceptual loss, the discriminator. A part not
    mentioned keeps its default (`encoding.DEFAULT_PARTS`), as the old defaults were."""
    if flat.get('in_channels', 3) != 3:
        raise ValueError(f'in_channels={flat["in_channels"]}; the tokenizer works on RGB '
                         'images (grey and RGBA inputs are converted to 3 channels)')
    parts = _codec_from_flat(flat) if set(flat) & set(CODEC_KEYS) else {}
    quantizer = {new: flat[old] for old, new in QUANTIZER_KEYS.items() if old in flat}
    if quantizer:
        parts['quantizer'] = dict(type='EMAVectorQuantizer', **quantizer)
    for old, (name, type_) in FLAT_PART_KEYS.items():
        if old in flat:
            parts[name] = dict(type=type_, **(flat[old] or {}))
    return parts


def _codec_from_flat(flat: dict) -> dict[str, dict]:
    """The encoder / decoder configs of the old `encoder_type` and its arguments (a decoder
    argument left None is the encoder's)."""
    encoder_type = flat.get('encoder_type', 'cnn')
    if encoder_type == 'cnn':
        given = ('base_channels', 'channel_mult', 'num_res_blocks', 'dropout')
        codec = cnn_parts(**{k: flat[k] for k in given if k in flat})
        decoder = codec['decoder']
        decoder['base_channels'] = flat.get('decoder_base_channels') or decoder['base_channels']
        decoder['num_res_blocks'] = (flat.get('decoder_num_res_blocks')
                                     or decoder['num_res_blocks'])
        return dict(encoder=codec['encoder'], decoder=decoder)
    if encoder_type == 'vit':
        vit_cfg = dict(flat.get('vit_cfg') or {})
        return dict(encoder=dict(type='ViTEncoder', **vit_cfg),
                    decoder=dict(type='ViTDecoder', **(flat.get('decoder_vit_cfg') or vit_cfg)))
    raise ValueError(f"encoder_type={encoder_type!r}; allowed: 'cnn', 'vit' (or give "
                     "encoder=dict(type=...) and decoder=dict(type=...))")
