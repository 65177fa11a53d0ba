"""Perceptual loss (Eq. 4): every network format loads from a random-weight timm / torchvision
model with features equal to the source; bad checkpoints fail before training."""
import pytest
import torch
import torch.nn.functional as F

from peco_mm.tokenizer.perceptual import PerceptualLoss


def _timm_vit():
    from timm.models.vision_transformer import VisionTransformer
    torch.manual_seed(0)
    return VisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=4, num_heads=4,
                             num_classes=10).eval()


def _timm_block_outputs(vit, x, blocks):
    """What timm's blocks themselves output (forward hooks), patch tokens as (B, C, h, w)."""
    got = {}
    hooks = [vit.blocks[i - 1].register_forward_hook(
        lambda mod, args, out, i=i: got.__setitem__(i, out)) for i in blocks]
    vit.forward_features(x)
    for h in hooks:
        h.remove()
    return [got[i][:, 1:].transpose(1, 2).reshape(len(x), -1, 4, 4) for i in sorted(blocks)]


VIT_LAYOUTS = {
    'timm': lambda sd: sd,
    'mocov3': lambda sd: {'state_dict': {f'module.base_encoder.{k}': v for k, v in sd.items()}},
    'mae': lambda sd: {'model': {k: v for k, v in sd.items() if not k.startswith('head')}},
    'dino': lambda sd: {'teacher': {f'backbone.{k}': v for k, v in sd.items()}},
}


@pytest.mark.parametrize('layout', sorted(VIT_LAYOUTS))
def test_vit_formats_features_equal_source(tmp_path, layout):
    vit = _timm_vit()
    path = tmp_path / f'{layout}.pth'
    torch.save(VIT_LAYOUTS[layout](vit.state_dict()), path)
    # heads cannot be read from weights: the converter assumes 64-d heads unless told
    # every selected layer is its block's raw output, the last one included (each of these
    # checkpoints holds the final norm.weight; the features never go through it)
    loss = PerceptualLoss('vit', str(path), layers=(1, 2, 3, 4), vit_cfg=dict(num_heads=4))
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        ours = loss.net(loss.normalize_input(x))
        ref = _timm_block_outputs(vit, loss.normalize_input(x), {1, 2, 3, 4})
    assert len(ours) == 4
    for a, b in zip(ours, ref):
        assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
    # building it without the final norm is accepted (the norm weights are skipped) and equal
    no_norm = PerceptualLoss('vit', str(path), layers=(1, 2, 3, 4),
                             vit_cfg=dict(num_heads=4, final_norm=False))
    with torch.no_grad():
        for a, b in zip(no_norm.net(no_norm.normalize_input(x)), ref):
            assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
    assert not any(p.requires_grad for p in loss.net.parameters())
    assert loss.state_dict() == {} or all('mean' in k or 'std' in k for k in loss.state_dict())


def _resnet_features(model, x):
    x = model.maxpool(model.relu(model.bn1(model.conv1(x))))
    outs = []
    for i in range(1, 5):
        x = getattr(model, f'layer{i}')(x)
        outs.append(x)
    return outs


RESNET_LAYOUTS = {
    'torchvision': lambda sd: sd,
    'moco_v2': lambda sd: {'state_dict': {f'module.encoder_q.{k}': v for k, v in sd.items()}},
    'moco_v3': lambda sd: {'state_dict': {f'module.base_encoder.{k}': v
                                          for k, v in sd.items() if not k.startswith('fc.')}},
}


@pytest.mark.parametrize('layout', sorted(RESNET_LAYOUTS))
def test_resnet50_formats_features_equal_source(tmp_path, layout):
    from torchvision.models import resnet50
    torch.manual_seed(0)
    src = resnet50(weights=None).eval()
    path = tmp_path / 'r50.pth'
    torch.save(RESNET_LAYOUTS[layout](src.state_dict()), path)
    loss = PerceptualLoss('resnet50', str(path))
    x = torch.rand(1, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        ours = loss.net(loss.normalize_input(x))
        ref = _resnet_features(src, loss.normalize_input(x))
    assert len(ours) == 4
    for a, b in zip(ours, ref):
        assert torch.allclose(a, b, atol=1e-5)


def test_vgg16_features_equal_source_and_eq4_value(tmp_path):
    from torchvision.models import vgg16
    torch.manual_seed(0)
    src = vgg16(weights=None).eval()
    path = tmp_path / 'vgg.pth'
    torch.save(src.state_dict(), path)
    loss = PerceptualLoss('vgg16', str(path), layers=(1, 3))
    x, y = torch.rand(2, 1, 3, 32, 32) * 2 - 1
    feats = []
    h = loss.normalize_input(x)
    with torch.no_grad():
        for i, layer in enumerate(src.features[:16]):
            h = layer(h)
            if i in (3, 15):  # relu1_2, relu3_3
                feats.append(h)
        ours = loss.net(loss.normalize_input(x))
    for a, b in zip(ours, feats):
        assert torch.allclose(a, b, atol=1e-5)
    # Eq. 4 by hand: unit-normalise channels, mean squared difference per layer, summed

    def norm(f):
        return f / f.pow(2).sum(1, keepdim=True).sqrt()
    fx = loss.net(loss.normalize_input(x))
    fy = loss.net(loss.normalize_input(y))
    expected = sum(F.mse_loss(norm(a), norm(b)) for a, b in zip(fx, fy))
    as_printed = PerceptualLoss('vgg16', str(path), layers=(1, 3), channel_reduction='mean')
    assert torch.allclose(as_printed(x, y), expected, rtol=1e-4)
    # the default LPIPS-style reduction sums the channels: C_l times each layer's term
    lpips = sum(a.shape[1] * F.mse_loss(norm(a), norm(b)) for a, b in zip(fx, fy))
    assert torch.allclose(loss(x, y), lpips, rtol=1e-4)
    assert float(loss(x, x)) < 1e-10


def test_bad_checkpoints_fail_naming_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match='missing.pth'):
        PerceptualLoss('vit', str(tmp_path / 'missing.pth'))
    with pytest.raises(ValueError, match='checkpoint path'):
        PerceptualLoss('vit', None)
    bogus = tmp_path / 'bogus.pth'
    torch.save({'foo.weight': torch.zeros(3)}, bogus)
    for net in ('vit', 'resnet50', 'vgg16'):
        with pytest.raises(ValueError, match='bogus.pth'):
            PerceptualLoss(net, str(bogus))
    with pytest.raises(ValueError, match='allowed'):
        PerceptualLoss('alexnet', None, allow_random=True)


def test_nonfinite_weights_are_refused_at_load_naming_the_file(tmp_path):
    sd = _timm_vit().state_dict()
    sd['blocks.1.mlp.fc1.weight'][0, 0] = float('nan')
    sd['blocks.2.norm1.bias'][5] = float('inf')
    path = tmp_path / 'vit_nan.pth'
    torch.save(sd, path)
    with pytest.raises(ValueError) as err:
        PerceptualLoss('vit', str(path), layers=(1, 2), vit_cfg=dict(num_heads=4))
    assert str(err.value) == (
        f'perceptual loss (vit): {str(path)!r} holds NaN/inf in 2 weight tensor(s) '
        '(vit.blocks.1.mlp.fc1.weight, vit.blocks.2.norm1.bias); the frozen network must be '
        'finite: use another checkpoint of it')


def test_the_frozen_network_moves_with_the_loss_and_stays_out_of_its_tree(tmp_path):
    """Held outside the module tree (no parameter, no state-dict key), the frozen network
    follows the loss through torch's public `.to()` (the `mean` buffer it follows)."""
    vit = _timm_vit()
    torch.save(vit.state_dict(), tmp_path / 'vit.pth')
    loss = PerceptualLoss('vit', str(tmp_path / 'vit.pth'), layers=(1,),
                          vit_cfg=dict(num_heads=4))
    assert list(loss.parameters()) == [] and list(loss.state_dict()) == []
    x = torch.rand(1, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        ref = loss(x, x.flip(-1))
        loss.to(torch.float64)
        assert {p.dtype for p in loss.net.parameters()} == {torch.float64}
        torch.testing.assert_close(loss(x.double(), x.flip(-1).double()).float(), ref)
