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
    codes, stored = tok.encode(ref['img']), ref[name]['codes']
    # each stored code is a nearest codeword of the encoder output now (the same code, or a
    # tie within float rounding: the thread count changes the order of the sums)
    with torch.no_grad():
        z = tok.encoder(ref['img']).permute(0, 2, 3, 1).flatten(0, 2)  # (N, D)
    dist = torch.cdist(z, tok.quantizer.embedding) ** 2  # (N, K)
    rows = torch.arange(len(z))
    got, want = dist[rows, codes.flatten()], dist[rows, stored.flatten()]
    assert torch.all(want - got <= 1e-5 * (1 + got)), (want - got).max()
    assert (codes == stored).float().mean() > 0.9
    assert torch.allclose(tok.decode(stored), ref[name]['recon'], atol=1e-5)
