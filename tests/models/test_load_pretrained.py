"""init_cfg=Pretrained: one key loads a PeCo checkpoint (prefix 'backbone.'), a converted file,
or a published timm file converted on the fly; a wrong file is an error."""
import pytest
import timm
import torch

from peco_mm.models import PeCoViT


def build(path, prefix='backbone.'):
    m = PeCoViT(arch='test', img_size=32, patch_size=8,
                init_cfg=dict(type='Pretrained', checkpoint=str(path), prefix=prefix))
    m.init_weights()
    return m.eval()


def test_peco_checkpoint_with_prefix(tmp_path):
    torch.manual_seed(0)
    src = PeCoViT(arch='test', img_size=32, patch_size=8).eval()
    sd = {'backbone.' + k: v for k, v in src.state_dict().items()}
    sd['head.fc.weight'] = torch.zeros(3, 64)
    torch.save({'state_dict': sd, 'meta': {}}, tmp_path / 'peco.pth')
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(build(tmp_path / 'peco.pth')(x)[0], src(x)[0])


def test_timm_file_is_converted_on_the_fly(tmp_path):
    torch.manual_seed(0)
    src = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=0).eval()
    torch.save(src.state_dict(), tmp_path / 'timm.pth')
    x = torch.randn(2, 3, 32, 32)
    ours = build(tmp_path / 'timm.pth')
    torch.testing.assert_close(ours(x)[0], src.forward_features(x)[:, 0], atol=1e-5, rtol=1e-5)


def test_timm_layer_scale_file_keeps_its_gammas(tmp_path):
    torch.manual_seed(0)
    src = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=0,
        init_values=0.1).eval()
    with torch.no_grad():
        for n, p in src.named_parameters():
            if n.endswith('gamma'):
                p.uniform_(0.5, 2.0)
    torch.save(src.state_dict(), tmp_path / 'timm_ls.pth')
    m = PeCoViT(arch='test', img_size=32, patch_size=8,
                layer_scale_init_value=0.1,
                init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'timm_ls.pth')))
    m.init_weights()
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(m.eval()(x)[0], src.forward_features(x)[:, 0], atol=1e-5,
                               rtol=1e-5)


def test_missing_and_unrelated_checkpoints_are_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match='nope.pth'):
        build(tmp_path / 'nope.pth')
    torch.save({'state_dict': {'conv1.weight': torch.zeros(3)}}, tmp_path / 'resnet.pth')
    with pytest.raises(ValueError, match='conv1.weight'):
        build(tmp_path / 'resnet.pth')


def test_pretraining_only_keys_are_logged_as_expected_drops(tmp_path, monkeypatch):
    """A pretraining checkpoint's [MASK] token and final norm are not in a fine-tuning backbone
    without them: one INFO line says so, and no warning."""
    from peco_mm.models import pretrained
    src = PeCoViT(arch='test', img_size=32, patch_size=8, use_mask_token=True)
    sd = {'backbone.' + k: v for k, v in src.state_dict().items()}
    assert {'backbone.mask_token', 'backbone.norm.weight'} <= set(sd)
    torch.save({'state_dict': sd}, tmp_path / 'pre.pth')
    logged = []
    monkeypatch.setattr('mmengine.logging.print_log',
                        lambda msg, logger=None, level=20: logged.append((level, msg)))
    model = PeCoViT(arch='test', img_size=32, patch_size=8, final_norm=False,
                    out_type='cls_token')
    missing, unexpected = pretrained.load_pretrained(model, str(tmp_path / 'pre.pth'), 'backbone.')
    assert sorted(unexpected) == ['mask_token', 'norm.bias', 'norm.weight']
    assert [lv for lv, _ in logged] == [20]
    assert "as expected: ['mask_token', 'norm.weight', 'norm.bias']" in logged[0][1]


def test_another_vit_flavour_is_refused_with_the_arguments_that_fit(tmp_path):
    """A timm ViT (absolute positions, no layer scale) into a PeCo-flavour backbone (layer
    scale, per-block relative positions) would load only partly and train on: refused, naming
    what would stay at its initial values and the arguments that load it, which then do."""
    torch.manual_seed(0)
    src = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=0).eval()
    path = tmp_path / 'timm.pth'
    torch.save(src.state_dict(), path)
    peco_flavour = dict(use_abs_pos_emb=False, rel_pos_bias='per_block',
                        layer_scale_init_value=0.1)
    with pytest.raises(ValueError) as err:
        PeCoViT(arch='test', img_size=32, patch_size=8, **peco_flavour,
                init_cfg=dict(type='Pretrained', checkpoint=str(path))).init_weights()
    msg = str(err.value)
    assert msg.startswith(f'{path}: a ViT of another flavour than this backbone: layer scale '
                          '(not in the file): 4, e.g. blocks.0.gamma_1; relative position bias '
                          '(not in the file): 2, e.g. blocks.0.rel_pos_bias.relative_position_'
                          'bias_table; absolute position embedding (in the file only): 1, e.g. '
                          'pos_embed. Loading it would leave these weights at their initial '
                          "values. Set the backbone's layer_scale_init_value=0.0, "
                          "rel_pos_bias='none', use_abs_pos_emb=True to fit it;")
    fixed = PeCoViT(arch='test', img_size=32, patch_size=8, layer_scale_init_value=0.0,
                    rel_pos_bias='none', use_abs_pos_emb=True,
                    init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    fixed.init_weights()
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(fixed.eval()(x)[0], src.forward_features(x)[:, 0], atol=1e-5,
                               rtol=1e-5)
    # another depth: the blocks the file lacks, and the depth that fits
    with pytest.raises(ValueError, match=r"transformer blocks \(not in the file\): 12, e\.g\. "
                       r"blocks\.2\.norm1\.weight\. .* Set the backbone's arch\.num_layers=2 "):
        PeCoViT(arch=dict(embed_dims=64, num_layers=3, num_heads=4), img_size=32, patch_size=8,
                init_cfg=dict(type='Pretrained', checkpoint=str(path))).init_weights()


def test_fc_norm_that_finetuning_adds_is_an_expected_gap_not_a_warning(tmp_path, monkeypatch):
    """Fine-tuning with global average pooling adds `fc_norm`, which a PeCo pretraining
    checkpoint does not have: one INFO line with the reason, no warning, and the weights the
    checkpoint does hold are loaded. A checkpoint that holds half of fc_norm is still a
    warning, naming the key."""
    from peco_mm.models import pretrained
    torch.manual_seed(0)
    src = PeCoViT(arch='test', img_size=32, patch_size=8, use_mask_token=True)  # pretraining
    sd = {'backbone.' + k: v for k, v in src.state_dict().items()}
    assert not any('fc_norm' in k for k in sd)
    torch.save({'state_dict': sd}, tmp_path / 'pre.pth')
    logged = []
    monkeypatch.setattr('mmengine.logging.print_log',
                        lambda msg, logger=None, level=20: logged.append((level, msg)))
    model = PeCoViT(arch='test', img_size=32, patch_size=8, final_norm=False,
                    out_type='avg_featmap')  # the fine-tuning configs' backbone
    missing, _ = pretrained.load_pretrained(model, str(tmp_path / 'pre.pth'), 'backbone.')
    assert sorted(missing) == ['fc_norm.bias', 'fc_norm.weight']
    assert [lv for lv, _ in logged] == [20, 20], logged
    gap = next(msg for _, msg in logged if 'fc_norm' in msg)
    assert gap == (f"{tmp_path / 'pre.pth'}: not in the checkpoint, as expected: fc_norm (2 "
                   "tensors), the norm after global average pooling (out_type='avg_featmap'), "
                   'which fine-tuning adds and pretraining has none of; it starts from its '
                   'initialisation, as in BEiT and MAE fine-tuning')
    own = model.state_dict()
    assert all(torch.equal(own[k[len('backbone.'):]], v) for k, v in sd.items()
               if k[len('backbone.'):] in own)
    # half of fc_norm in a fine-tuned file: not the expected gap, a warning naming the key
    tuned = {k: v for k, v in sd.items() if not k.startswith('backbone.norm.')}
    torch.save({'state_dict': {**tuned, 'backbone.fc_norm.weight': torch.ones(64)}},
               tmp_path / 'half.pth')
    logged.clear()
    pretrained.load_pretrained(model, str(tmp_path / 'half.pth'), 'backbone.')
    assert (30, f"{tmp_path / 'half.pth'}: missing keys ['fc_norm.bias']") in logged
