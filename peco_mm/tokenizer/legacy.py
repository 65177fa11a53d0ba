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

# the old arguments that fixed the encoder / decoder / codebook shapes: what an old
# checkpoint's `meta.tokenizer_arch` holds
FLAT_ARCH_KEYS = ('encoder_type', 'base_channels', 'channel_mult', 'num_res_blocks',
                  'decoder_base_channels', 'decoder_num_res_blocks', 'dropout', 'vit_cfg',
                  'decoder_vit_cfg', 'num_embeddings', 'embed_dims')
# the old training-only arguments: quantizer settings and the loss parts' argument dicts
FLAT_QUANTIZER_KEYS = {'decay': 'decay', 'beta': 'beta', 'codebook_init': 'init',
                       'kmeans_iters': 'kmeans_iters', 'restart_threshold': 'restart_threshold',
                       'restart_interval': 'restart_interval'}
FLAT_PART_KEYS = {'perceptual_cfg': ('perceptual', 'PerceptualLoss'),
                  'discriminator_cfg': ('discriminator', 'PatchDiscriminator')}
FLAT_KEYS = FLAT_ARCH_KEYS + tuple(FLAT_QUANTIZER_KEYS) + tuple(FLAT_PART_KEYS) + (
    'in_channels',)
PART_NAMES = ('encoder', 'decoder', 'quantizer', 'perceptual', 'discriminator')
CNN_DEFAULTS = dict(base_channels=64, channel_mult=(1, 2, 4, 8, 8), num_res_blocks=2,
                    dropout=0.0)


def check_flat_keys(flat: dict, owner: str, keys: tuple[str, ...] = FLAT_KEYS) -> None:
    """A TypeError naming an argument that is neither a part nor one of the old `keys`."""
    unknown = sorted(set(flat) - set(keys))
    if unknown:
        near = difflib.get_close_matches(unknown[0], PART_NAMES + keys, n=1)
        raise TypeError(f'{owner}: unknown argument {unknown[0]!r}'
                        + (f' (did you mean {near[0]!r}?)' if near else '')
                        + f'; the architecture is given as parts: {", ".join(PART_NAMES)}')


def translate_flat_args(flat: dict, parts: dict[str, dict | None]) -> dict[str, dict | None]:
    """`parts` (encoder, decoder, quantizer, perceptual, discriminator: a config or None)
    completed from a config's old flat arguments; a part given both ways is refused."""
    check_flat_keys(flat, 'PeCoTokenizer')
    translated = parts_from_flat(flat)
    if not set(flat) & set(FLAT_ARCH_KEYS + tuple(FLAT_QUANTIZER_KEYS) + ('in_channels',)):
        translated = {k: v for k, v in translated.items() if k in ('perceptual', 'discriminator')}
    both = sorted(k for k in translated if parts.get(k) is not None)
    if both:
        raise ValueError(f'PeCoTokenizer: {", ".join(both)} given both as a part config and '
                         f'as old flat arguments ({", ".join(sorted(flat))}); use the part '
                         'configs only')
    return {**parts, **translated}


def parts_from_flat(flat: dict) -> dict:
    """Old flat arguments -> the part dicts they describe: encoder, decoder and quantizer
    always; perceptual and discriminator when their old `*_cfg` is given."""
    if flat.get('in_channels', 3) != 3:
        raise ValueError(f'in_channels={flat["in_channels"]}; the tokenizer works on RGB '
                         'images (grey and RGBA inputs are converted to 3 channels)')
    encoder_type = flat.get('encoder_type', 'cnn')
    if encoder_type == 'cnn':
        cnn = {k: flat.get(k, v) for k, v in CNN_DEFAULTS.items()}
        cnn['channel_mult'] = tuple(cnn['channel_mult'])
        encoder = dict(type='CNNEncoder', **cnn)
        decoder = dict(type='CNNDecoder', **cnn)
        decoder['base_channels'] = flat.get('decoder_base_channels') or cnn['base_channels']
        decoder['num_res_blocks'] = (flat.get('decoder_num_res_blocks')
                                     or cnn['num_res_blocks'])
    elif encoder_type == 'vit':
        vit_cfg = dict(flat.get('vit_cfg') or {})
        encoder = dict(type='ViTEncoder', **vit_cfg)
        decoder = dict(type='ViTDecoder', **(flat.get('decoder_vit_cfg') or vit_cfg))
    else:
        raise ValueError(f"encoder_type={encoder_type!r}; allowed: 'cnn', 'vit' (or give "
                         "encoder=dict(type=...) and decoder=dict(type=...))")
    quantizer = dict(type='EMAVectorQuantizer')
    quantizer.update({k: flat[k] for k in ('num_embeddings', 'embed_dims') if k in flat})
    quantizer.update({new: flat[old] for old, new in FLAT_QUANTIZER_KEYS.items() if old in flat})
    parts = dict(encoder=encoder, decoder=decoder, quantizer=quantizer)
    for old, (name, type_) in FLAT_PART_KEYS.items():
        if old in flat:
            parts[name] = dict(type=type_, **(flat.get(old) or {}))
    return parts
