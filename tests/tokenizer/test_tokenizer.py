"""PeCoTokenizer: sizes, training, λ = 0 as a plain VQ-VAE, bad input, target generator."""
import pytest
import torch
import torch.nn.functional as F

from peco_mm.tokenizer import PeCoTokenizer, TokenizerDataPreprocessor

TINY = dict(base_channels=8, channel_mult=(1, 2, 2), num_res_blocks=1, num_embeddings=32,
            embed_dims=8, decay=0.9, restart_threshold=0.05, perceptual_weight=0.0)
TINY_VIT = dict(embed_dims=32, num_layers=1, num_heads=2, img_size=16, patch_size=4)


def tiny(**kw):
    torch.manual_seed(0)
    return PeCoTokenizer(**{**TINY, **kw})


def blocky_images(n=16, size=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return F.interpolate(torch.rand(n, 3, 4, 4, generator=g), size=size) * 2 - 1


def test_parameter_counts_match_the_paper():
    default = PeCoTokenizer(perceptual_weight=0.0, with_decoder=False).num_params()
    assert default['encoder'] == 35_424_448 and default['codebook'] == 8192 * 256
    assert round(default['tokenizer'] / 1e6, 1) == 37.5  # paper: 37.5M
    lite = PeCoTokenizer(perceptual_weight=0.0, with_decoder=False, base_channels=32,
                         channel_mult=(1, 2, 4, 8, 16)).num_params()
    assert round(lite['tokenizer'] / 1e6, 1) == 25.7  # paper: 25.7M
    t8 = PeCoTokenizer(perceptual_weight=0.0, with_decoder=False, channel_mult=(1, 2, 4, 8))
    t16 = PeCoTokenizer(perceptual_weight=0.0, with_decoder=False)
    assert t8.downsample == 8 and t16.downsample == 16


def test_tiny_tokenizer_trains_and_reconstruction_loss_falls():
    t = tiny()
    imgs = blocky_images()
    opt = torch.optim.Adam(t.parameters(), lr=3e-3, betas=(0.5, 0.95))
    g = torch.Generator().manual_seed(1)
    pix = []
    for _ in range(30):
        losses = t(imgs[torch.randint(16, (8,), generator=g)], mode='loss')
        opt.zero_grad()
        sum(v for k, v in losses.items() if k.startswith('loss')).backward()
        opt.step()
        pix.append(float(losses['loss_pixel'].detach()))
    assert sum(pix[-5:]) / 5 < 0.75 * sum(pix[:5]) / 5, pix
    t.eval()
    codes = t.encode(imgs)
    assert codes.shape == (16, 4, 4) and codes.dtype == torch.long
    assert not codes.is_inference()  # usable as a cross-entropy target
    recon = t.decode(codes)
    assert recon.shape == imgs.shape and recon.abs().max() <= 1
    # encode() agrees with the training path's codes
    _, codes2, _ = t.reconstruct(imgs)
    assert torch.equal(codes, codes2)


def test_lambda0_equals_plain_pixel_vqvae():
    x = blocky_images(4)
    t = tiny(perceptual_weight=0.0)
    assert t.perceptual is None
    t.train()
    torch.manual_seed(1)  # the data init of the codebook draws random encoder outputs
    losses = t(x, mode='loss')
    assert set(losses) == {'loss_pixel', 'loss_vq', 'perplexity'}
    # the same network run by hand: L1 pixel loss + β·commitment, nothing else
    t2 = tiny(perceptual_weight=0.0).train()
    torch.manual_seed(1)
    z = t2.encoder(x)
    zq, codes, commit = t2.quantizer(z)
    recon = t2.decoder(zq)
    assert torch.allclose(losses['loss_pixel'], F.l1_loss(recon, x))
    assert torch.allclose(losses['loss_vq'], commit)
    # λ > 0 adds exactly λ·L_percep on top
    vit = dict(net='vit', allow_random=True, layers=(1,), vit_cfg=TINY_VIT)
    t3 = tiny(perceptual_weight=3.0, perceptual_cfg=vit).train()
    torch.manual_seed(1)
    l3 = t3(x, mode='loss')
    assert torch.allclose(l3['loss_pixel'], losses['loss_pixel'])
    t4 = tiny(perceptual_weight=0.0).train()
    torch.manual_seed(1)
    recon3, _, _ = t4.reconstruct(x)
    assert torch.allclose(l3['loss_percep'], 3.0 * t3.perceptual(x, recon3), rtol=1e-5)


def test_nan_loss_stops_naming_iteration_and_terms():
    t = tiny().train()
    x = blocky_images(2)
    x[0, 0, 0, 0] = float('nan')
    t._iter = 7
    with pytest.raises(FloatingPointError, match=r'iteration 7.*loss_pixel=nan.*loss_vq='):
        t(x, mode='loss')


def test_grey_and_rgba_images_are_converted_and_bad_ones_named():
    from mmengine.structures import BaseDataElement
    pre = TokenizerDataPreprocessor()
    grey = torch.randint(0, 256, (1, 16, 16), dtype=torch.uint8)
    rgba = torch.randint(0, 256, (4, 16, 16), dtype=torch.uint8)
    out = pre(dict(inputs=[grey, rgba]))['inputs']
    assert out.shape == (2, 3, 16, 16)
    assert torch.allclose(out[0, 0], (grey[0].float() - 127.5) / 127.5)
    assert torch.allclose(out[0, 1], out[0, 2])
    assert torch.allclose(out[1], (rgba[:3].flip(0).float() - 127.5) / 127.5)  # BGR -> RGB
    bad = torch.zeros(5, 16, 16, dtype=torch.uint8)
    sample = BaseDataElement(metainfo=dict(img_path='data/odd.tif'))
    with pytest.raises(ValueError, match=r"odd.tif.*5 channels"):
        pre(dict(inputs=[bad], data_samples=[sample]))
    t = tiny().eval()
    assert t.encode(torch.zeros(1, 1, 16, 16)).shape == (1, 4, 4)
    with pytest.raises(ValueError, match='multiple of'):
        t.encode(torch.zeros(1, 3, 18, 16))


def test_target_generator_from_checkpoint(tmp_path):
    from mmengine.config import Config
    t = tiny().train()
    x = blocky_images(4)
    t(x, mode='loss')  # initialises the codebook from data
    cfg = Config(dict(model=dict(type='PeCoTokenizer', **TINY)))
    path = tmp_path / 'tok.pth'
    torch.save(dict(state_dict=t.state_dict(), meta=dict(cfg=cfg.pretty_text)), path)
    gen = PeCoTokenizer.from_checkpoint(str(path))
    assert gen.decoder is None and not gen.training
    assert not any(p.requires_grad for p in gen.parameters())
    gen.train()
    assert not gen.training  # stays frozen
    t.eval()
    assert torch.equal(gen.encode(x), t.encode(x))
    full = PeCoTokenizer.from_checkpoint(str(path), with_decoder=True)
    assert torch.allclose(full.decode(t.encode(x)), t.decode(t.encode(x)))
    # the config route: init_cfg=Pretrained, as a MIM config builds it
    init = PeCoTokenizer(**TINY, with_decoder=False, frozen=True,
                         init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    init.init_weights()
    assert torch.equal(init.encode(x), t.encode(x))
    # a checkpoint of another architecture is refused, naming the file
    other = PeCoTokenizer(**{**TINY, 'embed_dims': 4}, with_decoder=False, frozen=True,
                          init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(ValueError, match='tok.pth.*shapes differ'):
        other.init_weights()


def test_adversarial_loss_moves_each_network_by_its_own_loss():
    t = tiny(adversarial_weight=0.4, adversarial_start_iter=0,
             discriminator_cfg=dict(base_channels=8, num_layers=1)).train()
    x = blocky_images(4)
    losses = t(x, mode='loss')
    assert {'loss_adv', 'loss_disc'} <= set(losses)
    # generator adversarial loss: gradients into the decoder, none into the discriminator
    t.zero_grad()
    losses['loss_adv'].backward(retain_graph=True)
    assert all(p.grad is None for p in t.discriminator.parameters())
    assert t.decoder.conv_out.weight.grad.abs().sum() > 0
    t.zero_grad()
    losses['loss_disc'].backward()
    assert t.decoder.conv_out.weight.grad is None
    assert any(p.grad is not None and p.grad.abs().sum() > 0
               for p in t.discriminator.parameters())
    # before the start iteration both are zero
    t2 = tiny(adversarial_weight=0.4, adversarial_start_iter=100,
              discriminator_cfg=dict(base_channels=8, num_layers=1)).train()
    l2 = t2(x, mode='loss')
    assert float(l2['loss_adv'].detach()) == 0 and float(l2['loss_disc'].detach()) == 0


def test_vit_encoder_decoder_variant():
    t = tiny(encoder_type='vit', vit_cfg=TINY_VIT).train()
    x = blocky_images(2)
    losses = t(x, mode='loss')
    assert t.downsample == 4 and torch.isfinite(losses['loss_pixel'])
    assert t.eval().encode(x).shape == (2, 4, 4)
