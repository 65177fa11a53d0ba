"""Tiny DALL-E files as OpenAI releases them: a whole module pickled with `torch.save(module)`,
its classes named `dall_e.encoder.Encoder`, `dall_e.decoder.Decoder`, `dall_e.utils.Conv2d`,
... (a package the reader never has), written by the tests themselves."""
from __future__ import annotations

import copy
import sys
import types

import torch

TINY = dict(vocab_size=32, n_hid=8, n_init=8, group_count=4, blocks_per_group=1)


def openai_class_names() -> dict:
    from mmpretrain.models.selfsup.cae import Conv2d, DALLEEncoder, EncoderBlock

    from peco_mm.tokenizer.dalle import DalleDecoder, DalleDecoderBlock
    return {Conv2d: 'dall_e.utils.Conv2d', EncoderBlock: 'dall_e.encoder.EncoderBlock',
            DALLEEncoder: 'dall_e.encoder.Encoder',
            DalleDecoderBlock: 'dall_e.decoder.DecoderBlock',
            DalleDecoder: 'dall_e.decoder.Decoder'}


def save_as_openai_pickle(module: torch.nn.Module, path, extra: dict | None = None,
                          legacy: bool = False) -> None:
    """torch.save a copy of `module` whose classes (and submodules' classes) carry DALL-E's
    names, as a package `dall_e` importable only while saving. `extra`: attributes set on the
    top module (e.g. a hostile object)."""
    names = openai_class_names()
    made: dict[str, type] = {}

    def renamed(cls: type) -> type:
        full = names[cls]
        if full not in made:
            mod, name = full.rsplit('.', 1)
            made[full] = type(name, (cls,), {'__module__': mod, '__qualname__': name})
        return made[full]

    out = copy.deepcopy(module)
    for m in out.modules():
        if type(m) in names:
            m.__class__ = renamed(type(m))
    for k, v in (extra or {}).items():
        setattr(out, k, v)
    fake = {'dall_e': types.ModuleType('dall_e')}
    for full, cls in made.items():
        mod, name = full.rsplit('.', 1)
        fake.setdefault(mod, types.ModuleType(mod))
        setattr(fake[mod], name, cls)
    try:
        sys.modules.update(fake)
        torch.save(out, path, _use_new_zipfile_serialization=not legacy)
    finally:
        for mod in fake:
            sys.modules.pop(mod, None)


def write_tiny_dalle(folder, seed: int = 0, pickled_encoder: bool = True,
                     **arch) -> tuple[str, str, dict]:
    """(encoder file, decoder.pkl, the state dicts) of a random tiny DALL-E in `folder`
    (`TINY` with `arch` changed). The encoder is pickled as OpenAI ships it (encoder.pkl), or
    with `pickled_encoder=False` saved as a state dict, as OpenMMLab converted it
    (dalle_encoder.pth, what the BEiT config reads)."""
    from mmpretrain.models.selfsup.cae import DALLEEncoder

    from peco_mm.tokenizer.dalle import DalleDecoder
    arch = {**TINY, **arch}
    torch.manual_seed(seed)
    enc = DALLEEncoder(group_count=arch['group_count'], n_hid=arch['n_hid'],
                       n_blk_per_group=arch['blocks_per_group'], vocab_size=arch['vocab_size'])
    dec = DalleDecoder(**arch)
    for p in dec.parameters():  # DALL-E's biases start at zero: give them values to check
        torch.nn.init.normal_(p, std=0.2)
    dec_path = f'{folder}/decoder.pkl'
    if pickled_encoder:
        enc_path = f'{folder}/encoder.pkl'
        save_as_openai_pickle(enc, enc_path)
    else:
        enc_path = f'{folder}/dalle_encoder.pth'
        torch.save(enc.state_dict(), enc_path)
    save_as_openai_pickle(dec, dec_path)
    return enc_path, dec_path, dict(encoder=enc.state_dict(), decoder=dec.state_dict())
