"""Gumbel-softmax quantizer (the dVAE's codes): its numbers on tiny tensors, and a PeCo
tokenizer built with it in place of the EMA codebook."""
import math

import pytest
import torch

from peco_mm.layers.gumbel_quantizer import (GumbelQuantizer, annealed_temperature,
                                             kl_to_uniform)


def test_kl_to_uniform_is_log_k_minus_entropy():
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [2.0, 0.0, -1.0, 0.5], [9.0, -9.0, -9.0, -9.0]])
    p = logits.softmax(1)
    by_hand = (p * (p * 4).log()).sum(1)  # sum q log(q / (1/K))
    entropy = -(p * p.log()).sum(1)
    kl = kl_to_uniform(logits)
    assert torch.allclose(kl, by_hand, atol=1e-6)
    assert torch.allclose(kl, math.log(4) - entropy, atol=1e-6)
    assert kl[0].item() == pytest.approx(0.0, abs=1e-7)  # uniform q: no divergence
    assert kl[2].item() == pytest.approx(math.log(4), abs=1e-6)  # one-hot q: log K


def test_temperature_anneals_exponentially_then_holds():
    assert annealed_temperature(0, 1.0, 1 / 16, 100) == 1.0
    assert annealed_temperature(50, 1.0, 1 / 16, 100) == pytest.approx(0.25)  # sqrt(1/16)
    assert annealed_temperature(100, 1.0, 1 / 16, 100) == pytest.approx(1 / 16)
    assert annealed_temperature(500, 1.0, 1 / 16, 100) == pytest.approx(1 / 16)
    q = GumbelQuantizer(num_embeddings=4, embed_dims=2, anneal_iters=4)
    z = torch.randn(1, 2, 2, 2)
    seen = []
    for _ in range(5):  # each training step anneals, evaluation does not
        seen.append(q.temperature)
        q(z)
    q.eval()
    q(z)
    assert seen == pytest.approx([1.0, 0.5, 0.25, 0.125, 1 / 16])
    assert q.temperature == pytest.approx(1 / 16) and int(q.steps) == 5


def test_sample_becomes_the_hard_one_hot_as_tau_goes_to_zero():
    torch.manual_seed(0)
    q = GumbelQuantizer(num_embeddings=6, embed_dims=3, tau_start=1e-4, tau_end=1e-4,
                        kl_weight=0.5)
    z = torch.randn(2, 3, 2, 2, requires_grad=True)
    torch.manual_seed(1)
    soft, codes, loss = q(z)
    torch.manual_seed(1)  # the same Gumbel noise: the sampled code, one-hot
    noise = -torch.empty(2, 6, 2, 2).exponential_().log()
    sampled = (q.logits(z) + noise).argmax(1)
    assert torch.allclose(soft, q.codes_to_vectors(sampled), atol=1e-4)
    assert torch.equal(codes, q.logits(z).argmax(1))  # the code reported: argmax, no noise
    assert loss.item() == pytest.approx(0.5 * kl_to_uniform(q.logits(z)).mean().item())
    # hard=True: the forward value is exactly a codeword, the gradient that of the relaxation
    hard = GumbelQuantizer(num_embeddings=6, embed_dims=3, tau_start=2.0, hard=True)
    out, _, _ = hard(z)
    rows = out.permute(0, 2, 3, 1).reshape(-1, 3)
    assert all(any(torch.allclose(r, e) for e in hard.embedding) for r in rows)
    out.sum().backward()
    assert z.grad is not None and z.grad.abs().sum() > 0


def test_evaluation_and_encode_use_the_argmax_codeword():
    q = GumbelQuantizer(num_embeddings=5, embed_dims=2).eval()
    z = torch.randn(2, 2, 3, 3)
    out, codes, _ = q(z)
    assert torch.equal(q.encode(z), q.logits(z).argmax(1)) and torch.equal(codes, q.encode(z))
    assert torch.equal(out, q.codes_to_vectors(codes))
    with pytest.raises(ValueError, match=r'\(B, 2, h, w\)'):
        q(torch.randn(1, 3, 2, 2))
    with pytest.raises(ValueError, match='tau_end'):
        GumbelQuantizer(tau_start=0.1, tau_end=1.0)


def test_a_peco_tokenizer_trains_encodes_and_freezes_with_the_gumbel_quantizer(tmp_path):
    """The registered quantizer in place of the EMA codebook: the tokenizer's training loss
    has its KL term as loss_vq, `encode` gives the argmax codes, and the frozen tokenizer
    rebuilt from the saved checkpoint's parts gives the same codes and reconstructions."""
    from peco_mm.registry import MODELS
    from peco_mm.tokenizer import FrozenPeCoTokenizer, PeCoTokenizer
    from tests.tokenizer.test_parts import _save
    cnn = dict(type='CNNEncoder', base_channels=8, channel_mult=(1, 2), num_res_blocks=1)
    parts = dict(encoder=cnn, decoder=dict(cnn, type='CNNDecoder'),
                 quantizer=dict(type='GumbelQuantizer', num_embeddings=16, embed_dims=4))
    tok = PeCoTokenizer(**parts, perceptual_weight=0, channels_last=False)
    assert isinstance(tok.quantizer, MODELS.get('GumbelQuantizer'))
    img = torch.rand(2, 3, 16, 16) * 2 - 1
    losses = tok.loss(img)
    assert set(losses) >= {'loss_pixel', 'loss_vq'} and losses['loss_vq'] >= 0
    codes = tok.encode(img)
    assert codes.shape == (2, 8, 8) and int(codes.max()) < 16
    assert torch.equal(codes, tok.quantizer.logits(tok.encoder(img)).argmax(1))
    path = _save(tok, tmp_path / 'tok.pth', dict(type='PeCoTokenizer', **parts))
    frozen = FrozenPeCoTokenizer(path, with_decoder=True, channels_last=False)
    tok.eval()
    assert torch.equal(frozen.encode(img), tok.encode(img))
    assert torch.allclose(frozen.decode(codes), tok.decode(codes))


def test_a_training_step_samples_at_the_annealed_temperature():
    """forward's relaxed sample is torch's Gumbel-softmax at `temperature` (computed on the
    step counter's device, without a host sync), step after step."""
    import torch.nn.functional as F
    q = GumbelQuantizer(num_embeddings=8, embed_dims=4, anneal_iters=3).train()
    z = torch.randn(2, 4, 3, 3)
    for _ in range(5):
        tau = q.temperature
        torch.manual_seed(7)
        quantized, _, _ = q(z)
        torch.manual_seed(7)
        soft = F.gumbel_softmax(q.logits(z), tau=tau, dim=1)
        expected = torch.einsum('bkhw,kd->bdhw', soft, q.embedding.float())
        torch.testing.assert_close(quantized, expected)
    assert q.temperature == pytest.approx(1 / 16)
