"""The closed schema of what a checkpoint may rebuild: peco_mm's own part classes, per slot.

A tokenizer read from a file (`meta.tokenizer_parts`, the old `meta.tokenizer_arch` and
`meta.cfg` model) names its parts only from `STORED_PARTS`, and each is built by calling
the class found there, never through a registry (`peco_mm.checkpoint.stored_names` states
the argument rules). A converted PeCoViT's `meta.pecovit_args` is the `backbone` slot's.
A config is code and may name any registered part; a part read from a file may not.
"""
from __future__ import annotations

from ..checkpoint.stored_config import StoredConfigError
from ..checkpoint.stored_names import StoredPart, check_args, check_part, check_plain, stored_part
from ..layers.gumbel_quantizer import GumbelQuantizer
from ..layers.quantizer import EMAVectorQuantizer
from ..models.vit import PeCoViT
from .cnn import CNNDecoder, CNNEncoder
from .discriminator import PatchDiscriminator
from .perceptual import PerceptualLoss
from .vit_codec import ViTDecoder, ViTEncoder

# arguments that take a file, a URL or another part's config: never read from a checkpoint
NOT_STORED = ('checkpoint', 'pretrained', 'init_cfg', 'pyramid', 'vit_cfg')
_VIT = dict(exclude=NOT_STORED, dict_args=('arch',))

# slot -> name -> the class and the arguments a file may give it
STORED_PARTS: dict[str, dict[str, StoredPart]] = {
    'encoder': {'CNNEncoder': stored_part(CNNEncoder),
                'ViTEncoder': stored_part(ViTEncoder, PeCoViT, **_VIT)},
    'decoder': {'CNNDecoder': stored_part(CNNDecoder),
                'ViTDecoder': stored_part(ViTDecoder, PeCoViT, **_VIT)},
    'quantizer': {'EMAVectorQuantizer': stored_part(EMAVectorQuantizer),
                  'GumbelQuantizer': stored_part(GumbelQuantizer)},
    'perceptual': {'PerceptualLoss': stored_part(PerceptualLoss, exclude=NOT_STORED)},
    'discriminator': {'PatchDiscriminator': stored_part(PatchDiscriminator)},
    'backbone': {'PeCoViT': stored_part(PeCoViT, **_VIT)},
}
TOKENIZER_SLOTS = ('encoder', 'decoder', 'quantizer', 'perceptual', 'discriminator')
# the old flat arguments whose value is a ViT part's arguments
VIT_CFG_KEYS = {'vit_cfg': STORED_PARTS['encoder']['ViTEncoder'],
                'decoder_vit_cfg': STORED_PARTS['decoder']['ViTDecoder']}


def check_stored_parts(parts, where: str) -> None:
    """`meta.tokenizer_parts` of a file: a dict of tokenizer slots, each part in the schema."""
    if not isinstance(parts, dict):
        raise StoredConfigError(f'{where}: a {type(parts).__name__}, not a dict of part '
                                f'configs ({", ".join(TOKENIZER_SLOTS)})')
    for slot, cfg in parts.items():
        if slot not in TOKENIZER_SLOTS:
            raise StoredConfigError(f'{where}.{str(slot)[:80]}: not a tokenizer part; '
                                    f'allowed: {", ".join(TOKENIZER_SLOTS)}')
        check_part(cfg, slot, STORED_PARTS[slot], f'{where}.{slot}')


def check_stored_flat(flat: dict, where: str) -> None:
    """The old flat arguments read from a file (the keys that are read): plain values,
    `vit_cfg` / `decoder_vit_cfg` a ViT part's arguments, part configs in the schema."""
    for key, value in flat.items():
        if key in TOKENIZER_SLOTS:
            check_part(value, key, STORED_PARTS[key], f'{where}.{key}')
        elif key in VIT_CFG_KEYS:
            if value is not None:
                check_args(value, VIT_CFG_KEYS[key], f'{where}.{key}')
        else:
            check_plain(value, f'{where}.{key}')


def stored_class(slot: str, name: str) -> type:
    """The class of a part read from a file (checked before: `check_part`)."""
    part = STORED_PARTS[slot].get(name)
    if part is None:
        raise StoredConfigError(f'{slot}.type: {name!r} is not a part a checkpoint may rebuild '
                                f'as the {slot}; allowed: {", ".join(STORED_PARTS[slot])}')
    return part.cls


def check_pecovit_args(args, where: str) -> dict:
    """A converted file's `meta.pecovit_args` (PeCoViT's arguments), checked; returned."""
    check_args(args, STORED_PARTS['backbone']['PeCoViT'], where)
    return args
