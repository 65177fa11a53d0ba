"""PeCoTokenizer: sizes, training, λ = 0 as a plain VQ-VAE, bad input, target generator."""
import pytest
import torch
import torch.nn.functional as F

from peco_mm.checkpoint import read_checkpoint
from peco_mm.tokenizer import (FrozenPeCoTokenizer, PeCoTokenizer, TokenizerDataPreprocessor,
                               cnn_parts)

TINY = dict(**cnn_parts(8, (1, 2, 2), 1, num_embeddings=32, embed_dims=8, decay=0.9,
                        restart_threshold=0.05), perceptual_weight=0.0)
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
    lite = PeCoTokenizer(perceptual_weight=0.0, with_decoder=False,
                         **cnn_parts(32, (1, 2, 4, 8, 16))).num_params()
    assert round(lite['tokenizer'] / 1e6, 1) == 25.7  # paper: 25.7M
    t8 = PeCoTokenizer(perceptual_weight=0.0, with_decoder=False,
                       **cnn_parts(channel_mult=(1, 2, 4, 8)))
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
    t3 = tiny(perceptual_weight=3.0, perceptual=dict(type='PerceptualLoss', **vit)).train()
    torch.manual_seed(1)
    l3 = t3(x, mode='loss')
    assert torch.allclose(l3['loss_pixel'], losses['loss_pixel'])
    t4 = tiny(perceptual_weight=0.0).train()
    torch.manual_seed(1)
    recon3, _, _ = t4.reconstruct(x)
    assert torch.allclose(l3['loss_percep'], 3.0 * t3.perceptual(x, recon3), rtol=1e-5)


def test_nan_input_gives_nan_loss_and_keeps_the_codebook_finite():
    """A non-finite step is the runner's NonFiniteLossHook's to stop or skip (every stage
    alike); the EMA codebook update ignores the non-finite encoder outputs, so a skipped
    step leaves it finite."""
    t = tiny().train()
    x = blocky_images(2)
    t(x, mode='loss')  # initialises the codebook
    before = t.quantizer.embedding.clone()
    x[0] = float('nan')  # every encoder output of image 0 is NaN
    losses = t(x, mode='loss')
    assert not torch.isfinite(losses['loss_pixel']) and torch.isfinite(losses['perplexity'])
    assert bool(torch.isfinite(t.quantizer.embedding).all())
    assert not torch.equal(t.quantizer.embedding, before)  # image 1 still moved the EMA


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
    gen = FrozenPeCoTokenizer(str(path))
    assert gen.decoder is None and not gen.training
    assert not any(p.requires_grad for p in gen.parameters())
    gen.train()
    assert not gen.training  # stays frozen
    t.eval()
    assert torch.equal(gen.encode(x), t.encode(x))
    full = FrozenPeCoTokenizer(str(path), with_decoder=True)
    assert torch.allclose(full.decode(t.encode(x)), t.decode(t.encode(x)))
    # the config route: init_cfg=Pretrained, as a MIM config builds it
    init = PeCoTokenizer(**TINY, with_decoder=False, frozen=True,
                         init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    init.init_weights()
    assert torch.equal(init.encode(x), t.encode(x))
    # a checkpoint of another architecture is refused, naming the file
    other = PeCoTokenizer(**{**TINY, 'quantizer': dict(TINY['quantizer'], embed_dims=4)},
                          with_decoder=False, frozen=True,
                          init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(ValueError, match='tok.pth.*shapes differ'):
        other.init_weights()


def _save_trained(tmp_path, with_meta=True, **kw):
    from mmengine.config import Config
    t = tiny(**kw).train()
    x = blocky_images(4)
    t(x, mode='loss')  # initialises the codebook from data
    cfg = Config(dict(model=dict(type='PeCoTokenizer', **{**TINY, **kw})))
    path = tmp_path / 'tok.pth'
    ckpt = dict(state_dict=t.state_dict())
    if with_meta:
        ckpt['meta'] = dict(cfg=cfg.pretty_text)
    torch.save(ckpt, path)
    return str(path), t.eval(), x


def test_frozen_tokenizer_reads_its_architecture_from_the_checkpoint(tmp_path):
    """FrozenPeCoTokenizer(checkpoint) alone rebuilds a non-default architecture (3 stages of
    8/16/16 channels, K = 32, D = 8): encoder + codebook, frozen, eval, no data preprocessor,
    the same codes as the trained model; with_decoder=True also decodes."""
    from mmengine.registry import MODELS
    path, t, x = _save_trained(tmp_path)
    gen = MODELS.build(dict(type='FrozenPeCoTokenizer', checkpoint=path))
    assert isinstance(gen, FrozenPeCoTokenizer)
    assert (gen.num_embeddings, gen.embed_dims, gen.downsample) == (32, 8, 4)
    assert gen.decoder is None and not hasattr(gen, 'data_preprocessor')
    assert sorted({k.split('.')[0] for k in gen.state_dict()}) == ['encoder', 'quantizer']
    assert not any(p.requires_grad for p in gen.parameters()) and not gen.train().training
    assert torch.equal(gen.encode(x), t.encode(x))
    before = {k: v.clone() for k, v in gen.state_dict().items()}
    gen.init_weights()  # a parent's init_weights leaves the loaded weights alone
    assert all(torch.equal(v, gen.state_dict()[k]) for k, v in before.items())
    full = FrozenPeCoTokenizer(path, with_decoder=True)
    assert torch.allclose(full.decode(t.encode(x)), t.decode(t.encode(x)))
    # a file without the stored config: the CNN architecture is read off the weights' shapes
    from peco_mm.tokenizer.frozen import checkpoint_parts, infer_cnn_arch
    (tmp_path / 'bare').mkdir()
    bare, _, _ = _save_trained(tmp_path / 'bare', with_meta=False)
    inferred = infer_cnn_arch(read_checkpoint(bare)['state_dict'])
    assert inferred == dict(encoder_type='cnn', base_channels=8, channel_mult=(1, 2, 2),
                            num_res_blocks=1, num_embeddings=32, embed_dims=8)
    # with the config text (as mmengine stores it, read as data): the model's part configs
    assert checkpoint_parts(read_checkpoint(path), path) == t.arch_parts
    assert torch.equal(FrozenPeCoTokenizer(bare).encode(x), t.encode(x))
    torch.save({'state_dict': {'foo.weight': torch.zeros(2)}}, tmp_path / 'bogus.pth')
    with pytest.raises(ValueError, match='bogus.pth.*architecture is unknown'):
        FrozenPeCoTokenizer(str(tmp_path / 'bogus.pth'))
    with pytest.raises(TypeError, match="unknown argument 'decay'"):
        FrozenPeCoTokenizer(path, decay=0.5)
    with pytest.raises(FileNotFoundError, match='model.target_generator.checkpoint'):
        FrozenPeCoTokenizer(str(tmp_path / 'missing.pth'))


def test_encode_is_the_quantizers_encode_of_the_encoder_output():
    t = tiny().train()
    x = blocky_images(4)
    t(x, mode='loss')
    t.eval()
    with torch.no_grad():
        expected = t.quantizer.encode(t.encoder(x))
    assert torch.equal(t.encode(x), expected)
    # bf16 on request runs the encoder under CPU autocast; the search stays fp32
    assert t.encode(x, bf16=True).shape == expected.shape


def test_encode_bf16_setting_picks_the_encoders_precision(monkeypatch):
    """encode_bf16: False fp32, True bf16 on any device, 'auto' bf16 only where the device is
    native (detected); the encoder's output dtype shows which ran; a typo is refused."""
    from peco_mm.tokenizer import encoding as tok_module
    t = tiny().eval()
    x = blocky_images(2)
    seen = []
    t.encoder.register_forward_hook(lambda m, i, out: seen.append(out.dtype))

    def encode_dtype(setting, native):
        monkeypatch.setattr('peco_mm.utils.precision.cpu_has_native_bf16', lambda: native)
        t.encode_bf16 = tok_module.check_encode_bf16(setting)
        t.encode(x)
        return seen[-1]
    assert encode_dtype(False, True) == torch.float32
    assert encode_dtype(True, False) == torch.bfloat16
    assert encode_dtype('auto', True) == torch.bfloat16
    assert encode_dtype('auto', False) == torch.float32
    assert t.encode(x, bf16=False).dtype == torch.long and seen[-1] == torch.float32
    for bad in ('yes', 1, None):
        with pytest.raises(ValueError, match=f"encode_bf16={bad!r}; expected one of"):
            tok_module.check_encode_bf16(bad)
    with pytest.raises(ValueError, match="encode_bf16='on'"):
        tiny(encode_bf16='on')


def test_perceptual_gradient_share_is_logged_from_the_last_backward():
    """percep_grad_share at step 2 = ||λ∇L_percep|| / (||∇L_pixel|| + ||λ∇L_percep||) at the
    reconstruction of step 1, as computed by autograd separately."""
    from peco_mm.tooling.loss_balance import perceptual_gradient_shares
    vit = dict(net='vit', allow_random=True, layers=(1,), vit_cfg=TINY_VIT)
    t = tiny(perceptual_weight=3.0, perceptual=dict(type='PerceptualLoss', **vit)).train()
    x = blocky_images(4)
    torch.manual_seed(1)
    losses = t(x, mode='loss')
    assert 'percep_grad_share' not in losses  # nothing measured before the first backward
    t.quantizer.eval()  # the same codebook for the by-hand reconstruction
    with torch.no_grad():
        recon = t.reconstruct(x)[0]
    expected = perceptual_gradient_shares(t.perceptual, x, recon, lambdas=(3.0,))[3.0]
    t.quantizer.train()
    sum(v for k, v in losses.items() if k.startswith('loss')).backward()
    share = t(x, mode='loss')['percep_grad_share']
    assert 0.01 < expected < 0.99
    assert abs(float(share) - expected) < 1e-5, (float(share), expected)


def test_classification_codeword_loss():
    """Table 6, row 1: cross-entropy of a linear classifier on the pooled quantised codewords;
    its gradient reaches the encoder (straight through) and the classifier, not the decoder."""
    from mmpretrain.structures import DataSample
    t = tiny(codeword_loss='classification', codeword_loss_cfg=dict(num_classes=3)).train()
    x = blocky_images(6)
    labels = [0, 1, 2, 0, 1, 2]
    samples = [DataSample().set_gt_label(y) for y in labels]
    torch.manual_seed(1)
    t(x, samples, mode='loss')  # initialises the codebook
    t.quantizer.eval()  # fixed codebook from here on: the by-hand codewords are the step's
    losses = t(x, samples, mode='loss')
    with torch.no_grad():
        zq = t.quantizer.codes_to_vectors(t.encode(x))  # the step's codewords
        fc = t.codeword_loss.head.fc
        expected = F.cross_entropy(fc(zq.mean((2, 3))), torch.tensor(labels))
    assert torch.allclose(losses['loss_codeword'], expected, atol=1e-5)
    t.zero_grad()
    losses['loss_codeword'].backward()
    assert t.encoder.conv_out.weight.grad.abs().sum() > 0 and fc.weight.grad.abs().sum() > 0
    assert t.decoder.conv_out.weight.grad is None
    with pytest.raises(ValueError, match='needs image labels'):
        t.train()(x, [DataSample() for _ in labels], mode='loss')


def test_contrastive_codeword_loss(monkeypatch):
    """Table 6, row 2: MoCo v2 on pooled quantised codewords. With the second view set to
    the image itself, the momentum encoder equal to the online one at the first step gives
    keys = queries: loss = CE([1, q·queue] / τ, 0); the keys then enter the queue, and the
    momentum encoder moves by 0.001 towards the online one."""
    from peco_mm.tokenizer.codeword_loss import CodewordContrastiveLoss
    cfg = dict(queue_size=8, proj_dims=4, hid_dims=16, temperature=0.2)
    t = tiny(codeword_loss='contrastive', codeword_loss_cfg=cfg).train()
    cl = t.codeword_loss
    assert isinstance(cl, CodewordContrastiveLoss)
    monkeypatch.setattr(cl, 'second_view', lambda img: img)
    x = blocky_images(3)
    torch.manual_seed(1)
    t.quantizer(t.encoder(x))  # initialises the codebook
    t.quantizer.eval()  # fixed codebook from here on: the by-hand codewords are the step's
    queue = cl.queue.clone()
    loss = t(x, mode='loss')['loss_codeword']
    with torch.no_grad():
        zq = t.quantizer.codes_to_vectors(t.encode(x))
        q = F.normalize(cl.neck((zq,))[0], dim=1)  # (3, 4)
    logits = torch.cat([torch.ones(3, 1), q @ queue.t()], 1) / 0.2
    assert torch.allclose(loss, F.cross_entropy(logits, torch.zeros(3, dtype=torch.long)),
                          atol=1e-4)
    assert torch.allclose(cl.queue[:3], q, atol=1e-5) and int(cl.queue_ptr) == 3
    enc_k = cl.momentum_encoder.module[0]
    for pk, p in zip(enc_k.parameters(), t.encoder.parameters()):
        assert torch.equal(pk, p) and not pk.requires_grad
    w0 = t.encoder.conv_out.weight.detach().clone()
    opt = torch.optim.SGD([p for p in t.parameters() if p.requires_grad], lr=0.1)
    loss.backward()
    opt.step()
    w1 = t.encoder.conv_out.weight.detach().clone()
    assert not torch.equal(w0, w1)
    t(x, mode='loss')
    # the momentum encoder moved before the step's keys: 0.999 · w0 + 0.001 · w1
    assert torch.allclose(enc_k.conv_out.weight, 0.999 * w0 + 0.001 * w1, atol=1e-7)
    assert int(cl.queue_ptr) == 6


def test_adversarial_loss_moves_each_network_by_its_own_loss():
    t = tiny(adversarial_weight=0.4, adversarial_start_iter=0,
             discriminator=dict(type='PatchDiscriminator', base_channels=8, num_layers=1)).train()
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
              discriminator=dict(type='PatchDiscriminator', base_channels=8, num_layers=1)).train()
    l2 = t2(x, mode='loss')
    assert float(l2['loss_adv'].detach()) == 0 and float(l2['loss_disc'].detach()) == 0


def test_vit_encoder_decoder_variant():
    t = tiny(encoder=dict(type='ViTEncoder', **TINY_VIT),
             decoder=dict(type='ViTDecoder', **TINY_VIT)).train()
    x = blocky_images(2)
    losses = t(x, mode='loss')
    assert t.downsample == 4 and torch.isfinite(losses['loss_pixel'])
    assert t.eval().encode(x).shape == (2, 4, 4)


def test_shipped_pretraining_targets_are_bf16_where_native():
    """Every shipped config whose targets come from a FrozenPeCoTokenizer asks for bf16 where
    native ('auto'); the study's reference runs pin fp32 (its --bf16-targets row differs)."""
    from mmengine.config import Config

    from tests.conftest import ROOT
    found = []
    for path in sorted((ROOT / 'configs' / 'peco').glob('pretrain_*.py')):
        tg = Config.fromfile(str(path)).model.get('target_generator') or {}
        if tg.get('type') == 'FrozenPeCoTokenizer':
            found.append(path.name)
            assert tg.encode_bf16 == 'auto', path.name
    assert 'pretrain_vitb_in1k_300e.py' in found and 'pretrain_mae_vitb_in1k_800e.py' in found
    study = Config.fromfile(str(ROOT / 'configs' / 'study' / 'pretrain_pixel_world.py'))
    assert study.model.target_generator.encode_bf16 is False


def test_target_memory_format_follows_the_device_and_the_codes_do_not(tmp_path):
    """'auto' (a target's default): channels-last on a CPU, contiguous on CUDA (picked by the
    device alone, so checked here without a GPU); the encoder's weights follow once, the first
    time the device asks for the other format; the codes are the same in either format."""
    from peco_mm.tokenizer.encoding import encode_memory_format
    cl, plain = torch.channels_last, torch.contiguous_format
    auto = [encode_memory_format('auto', d) for d in ('cpu', 'cuda', 'cuda:1')]
    assert auto == [cl, plain, plain]
    assert [encode_memory_format(s, 'cuda') for s in (True, False)] == [cl, plain]
    assert [encode_memory_format(s, 'cpu') for s in (True, False)] == [cl, plain]
    path, t, x = _save_trained(tmp_path)
    gen = FrozenPeCoTokenizer(path)
    conv = gen.encoder.conv_in.weight
    assert gen.channels_last == 'auto' and gen.compile_encoder == 'auto'
    assert conv.is_contiguous(memory_format=cl) and not conv.is_contiguous()
    moves = []
    gen.encoder.register_forward_pre_hook(lambda m, i: moves.append(i[0].is_contiguous()))
    codes = gen.encode(x)
    assert moves == [False]  # channels-last input on the CPU
    assert gen.encoder_layout(torch.device('cuda')) == plain  # as on CUDA: the weights follow
    assert gen.encoder.conv_in.weight.is_contiguous()
    assert torch.equal(gen.encode(x, bf16=False), codes)  # back to the CPU's channels-last
    assert gen.encoder.conv_in.weight.is_contiguous(memory_format=cl) and moves[-1] is False
    contiguous = FrozenPeCoTokenizer(path, channels_last=False)
    assert contiguous.encoder.conv_in.weight.is_contiguous()
    assert torch.equal(contiguous.encode(x), codes) and torch.equal(t.encode(x), codes)
    with pytest.raises(ValueError, match="channels_last='yes'; expected one of"):
        FrozenPeCoTokenizer(path, channels_last='yes')
    with pytest.raises(ValueError, match="compile_encoder=1; expected one of"):
        tiny(compile_encoder=1)


def test_target_compiles_on_cuda_by_default_and_falls_back_to_eager(tmp_path, monkeypatch):
    """compile_encoder 'auto' compiles on CUDA only (the CPU run below never calls
    torch.compile); True compiles anywhere; a compile that fails logs one line, encodes
    eagerly (the same codes) and is not tried again; copies leave the compiled encoder out."""
    import copy

    from peco_mm.tokenizer.encoding import compiles_encoder
    assert [compiles_encoder('auto', d) for d in ('cpu', 'cuda')] == [False, True]
    assert [compiles_encoder(s, 'cpu') for s in (True, False)] == [True, False]
    path, t, x = _save_trained(tmp_path)
    compiled, logged = [], []

    def failing_compile(module):
        compiled.append(module)

        def run(img):
            raise RuntimeError('InductorError: no working C++ compiler found\nmore detail')
        return run

    monkeypatch.setattr(torch, 'compile', failing_compile)
    monkeypatch.setattr('mmengine.logging.print_log',
                        lambda msg, **kw: 'compile' in msg and logged.append(msg))
    eager = FrozenPeCoTokenizer(path).encode(x)  # 'auto' on the CPU: eager, no compile
    assert compiled == [] and torch.equal(eager, t.encode(x))
    gen = FrozenPeCoTokenizer(path, compile_encoder=True)
    assert torch.equal(gen.encode(x), eager) and torch.equal(gen.encode(x), eager)
    assert compiled == [gen.encoder] and len(logged) == 1
    assert 'torch.compile of the target encoder failed (RuntimeError: InductorError: no ' \
           'working C++ compiler found); encoding in eager mode' in logged[0]
    # a compile that works is used from then on, and is not copied with the model
    monkeypatch.setattr(torch, 'compile', lambda module: compiled.append(module) or module)
    ok = FrozenPeCoTokenizer(path, compile_encoder=True)
    assert torch.equal(ok.encode(x), eager) and len(compiled) == 2 and len(logged) == 1
    assert '_compiled_encoder' in ok.__dict__
    assert '_compiled_encoder' not in copy.deepcopy(ok).__dict__


ADV = dict(adversarial_weight=0.4, adversarial_start_iter=0,
           discriminator=dict(type='PatchDiscriminator', base_channels=8, num_layers=1))
PERCEP = dict(perceptual_weight=1.0,
              perceptual=dict(vit_cfg=TINY_VIT, layers=(1, ), allow_random=True))


def test_fp32_training_step_is_the_plain_computation():
    """train_bf16=False (the default): the step's losses are exactly what the parts give when
    called one after another outside any autocast region (no cast, no autocast added)."""
    t = tiny(**ADV, **PERCEP).train()
    assert t.train_bf16 is False
    x = blocky_images(4)
    state = {k: v.clone() for k, v in t.quantizer.state_dict().items()}
    torch.manual_seed(5)  # the codebook's initial draw
    losses = t(x, mode='loss')
    t.quantizer.load_state_dict(state)  # the same codebook for the reference computation
    torch.manual_seed(5)
    zq, codes, loss_vq = t.quantizer(t.encoder(x))
    recon = t.decoder(zq)
    d = t.discriminator
    assert torch.equal(losses['loss_vq'], loss_vq)
    assert torch.equal(losses['loss_pixel'], F.l1_loss(recon, x))
    assert torch.equal(losses['loss_percep'], t.perceptual(x, recon))
    expected_disc = 0.5 * (F.softplus(-d(x)).mean() + F.softplus(d(recon)).mean())
    assert torch.equal(losses['loss_disc'], expected_disc)
    assert torch.equal(losses['loss_adv'], 0.4 * F.softplus(-d(recon)).mean())


def test_bf16_training_step_keeps_codebook_and_losses_fp32_and_learns(monkeypatch):
    """train_bf16=True: encoder, decoder, perceptual network and discriminator run in bf16
    autocast; the codebook's buffers, the distances' inputs and every loss stay fp32, the
    gradients reach fp32 weights, and the pixel loss falls as in fp32. 'auto' follows the
    detection of native bf16; a typo is refused."""
    t = tiny(train_bf16=True, **ADV, **PERCEP).train()
    seen = {}

    def record(name):  # the first call's output dtype of a part (the quantizer's input's)
        def hook(m, args, out=None):
            seen.setdefault(name, (args[0] if out is None else out).dtype)
        return hook
    for name in ('encoder', 'decoder', 'discriminator'):
        getattr(t, name).register_forward_hook(record(name))
    t.quantizer.register_forward_pre_hook(record('quantizer_in'))
    opt = torch.optim.Adam(t.parameters(), lr=3e-3, betas=(0.5, 0.95))
    imgs, g, pix = blocky_images(), torch.Generator().manual_seed(1), []
    for _ in range(30):
        losses = t(imgs[torch.randint(16, (8,), generator=g)], mode='loss')
        assert all(v.dtype == torch.float32 for v in losses.values()), losses
        opt.zero_grad()
        sum(v for k, v in losses.items() if k.startswith('loss')).backward()
        opt.step()
        pix.append(float(losses['loss_pixel'].detach()))
    assert seen == dict(encoder=torch.bfloat16, decoder=torch.bfloat16,
                        discriminator=torch.bfloat16, quantizer_in=torch.bfloat16)
    buffers = dict(t.quantizer.named_buffers())
    assert all(buffers[k].dtype == torch.float32 for k in
               ('embedding', 'cluster_size', 'embed_sum', 'window_counts'))
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32
               for p in t.parameters() if p.grad is not None)
    assert torch.isfinite(t.quantizer.embedding).all()
    # as in fp32 with the same losses and batches (there the last 5 are 0.79 of the first 5)
    assert sum(pix[-5:]) / 5 < 0.85 * sum(pix[:5]) / 5, pix
    # 'auto': bf16 only where the CPU computes it natively (detected, monkeypatched here)
    for native, expected in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr('peco_mm.utils.precision.cpu_has_native_bf16', lambda: native)
        auto = tiny(train_bf16='auto').train()
        dtypes = []
        auto.decoder.register_forward_hook(lambda m, i, out: dtypes.append(out.dtype))
        auto(blocky_images(2), mode='loss')
        assert dtypes == [expected]
    with pytest.raises(ValueError, match="train_bf16='on'; expected one of"):
        tiny(train_bf16='on')


def test_quantizer_distances_and_ema_are_fp32_inside_autocast():
    """Under bf16 autocast the quantizer searches, updates its EMA and reduces its loss in
    fp32: the commitment loss is fp32, the buffers stay fp32, and the codes are those of the
    fp32 search on the same (bf16-rounded) encoder output."""
    from peco_mm.layers.quantizer import EMAVectorQuantizer, nearest_codes
    torch.manual_seed(0)
    q = EMAVectorQuantizer(num_embeddings=16, embed_dims=8, init='random').train()
    z = torch.randn(2, 8, 4, 4).bfloat16()
    expected = nearest_codes(z.float().permute(0, 2, 3, 1).reshape(-1, 8), q.embedding)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        quantized, codes, loss = q(z)
    assert torch.equal(codes.flatten(), expected)
    assert loss.dtype == torch.float32 and quantized.dtype == torch.bfloat16
    assert all(b.dtype == torch.float32 for n, b in q.named_buffers()
               if n in ('embedding', 'cluster_size', 'embed_sum', 'window_counts'))
