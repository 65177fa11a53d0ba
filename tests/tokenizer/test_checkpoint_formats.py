"""Tokenizer checkpoints of every format this package has written load to the same model.

`data/flat_arch_{cnn,vit}.pth` were written before the tokenizer was built from registered
parts: their `meta.tokenizer_arch` holds the flat architecture arguments of that time
(`encoder_type`, `base_channels`, `vit_cfg`, ...). `data/flat_arch_outputs.pt` holds an input
and the codes and reconstructions that code computed from them.
"""
from pathlib import Path

import pytest
import torch

DATA = Path(__file__).parent / 'data'


@pytest.mark.parametrize('name', ['cnn', 'vit'])
def test_a_flat_architecture_checkpoint_gives_the_codes_and_reconstructions_it_gave(name):
    from peco_mm.tokenizer import FrozenPeCoTokenizer
    ref = torch.load(DATA / 'flat_arch_outputs.pt', weights_only=True)
    tok = FrozenPeCoTokenizer(str(DATA / f'flat_arch_{name}.pth'), with_decoder=True,
                              channels_last=False)
    codes = tok.encode(ref['img'])
    assert torch.equal(codes, ref[name]['codes'])
    assert torch.allclose(tok.decode(codes), ref[name]['recon'].clamp(-1, 1), atol=1e-6)
