"""Table 4's classifier on reconstructions: mmpretrain's ViT classifier, its checkpoint loaded
unchanged, scoring a frozen tokenizer's 8-bit reconstructions; checked against mmpretrain's own
ImageClassifier fed the same reconstructions, and the shipped config run by tools/test.py."""
import json

import numpy as np
import pytest
import torch

from tests.conftest import ROOT, run_tool
from tests.mim.conftest import fitted_tokenizer, halves_images, save_tokenizer, \
    to_tokenizer_input

VIT = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)
MEAN, STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)


@pytest.fixture(scope='module')
def tokenizer_file(tmp_path_factory):
    path = tmp_path_factory.mktemp('tok') / 'tokenizer.pth'
    return save_tokenizer(fitted_tokenizer(halves_images(64)), str(path))


def classifier(backbone_type='VisionTransformer', **backbone):
    """Built in mmpretrain's scope, whatever scope an earlier test on this worker left."""
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(dict(
            type='ImageClassifier',
            backbone=dict(type=backbone_type, arch=VIT, img_size=32, patch_size=8, **backbone),
            head=dict(type='VisionTransformerClsHead', num_classes=3, in_channels=32)))


@pytest.fixture(scope='module')
def classifier_file(tmp_path_factory):
    """A plain mmpretrain ViT classifier's checkpoint, as its recipe writes one."""
    torch.manual_seed(0)
    ref = classifier()
    ref.init_weights()
    for p in ref.head.parameters():  # mmpretrain's head starts at zero: every logit equal
        torch.nn.init.normal_(p, std=0.5)
    path = tmp_path_factory.mktemp('cls') / 'classifier.pth'
    torch.save({'state_dict': ref.state_dict()}, path)
    return str(path), ref.eval()


def test_logits_are_the_reference_classifier_on_8bit_recons(tokenizer_file, classifier_file):
    from mmengine.runner import load_checkpoint
    path, ref = classifier_file
    model = classifier('ReconstructionViT', tokenizer=tokenizer_file).eval()
    load_checkpoint(model, path, strict=True)  # no tokenizer keys needed, none left over
    assert not any(k.startswith('backbone._tokenizer') or 'tokenizer' in k
                   for k in model.state_dict())
    x = to_tokenizer_input(halves_images(6, seed=4))  # (6, 3, 32, 32) in [-1, 1]
    tok = model.backbone.tokenizer
    with torch.no_grad():
        recon = tok.decode(tok.encode(x))
        pixels = ((recon + 1) * 127.5).round().clamp(0, 255)
        want = ref((pixels - torch.tensor(MEAN).view(1, 3, 1, 1))
                   / torch.tensor(STD).view(1, 3, 1, 1), mode='tensor')
        got = model(x, mode='tensor')
    assert torch.allclose(got, want, atol=1e-5)
    # the reconstruction, not the input, is what gets classified: they differ, and so do the
    # logits of different images
    assert (pixels - (x + 1) * 127.5).abs().max() > 1
    assert torch.equal(model.backbone.reconstruct(x), pixels)
    assert (got[0] - got[1]).abs().max() > 1e-4
    assert not any(p.requires_grad for p in tok.parameters()) and not tok.training


def test_the_tokenizer_follows_the_model_across_devices_and_dtypes(tokenizer_file):
    model = classifier('ReconstructionViT', tokenizer=tokenizer_file).double()
    assert next(model.backbone.tokenizer.parameters()).dtype == torch.float64
    assert model.backbone.pixel_mean.dtype == torch.float64


def test_missing_tokenizer_names_the_key():
    with pytest.raises(FileNotFoundError, match='model.backbone.tokenizer'):
        classifier('ReconstructionViT', tokenizer='nowhere.pth')


CFG = '''
_base_ = {base!r}
model = dict(backbone=dict(_delete_=True, type='ReconstructionViT', tokenizer={tok!r},
                           arch={vit!r}, img_size=32, patch_size=8),
             head=dict(num_classes=3, in_channels=32))
data_preprocessor = dict(num_classes=3)
pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
test_dataloader = dict(batch_size=4, num_workers=0, persistent_workers=False,
                       dataset=dict(_delete_=True, type='CustomDataset', data_root={val!r},
                                    pipeline=pipeline))
test_evaluator = dict(type='Accuracy', topk=(1, ))
'''


def test_shipped_config_scores_with_mmpretrain_accuracy(tmp_path, tokenizer_file,
                                                        classifier_file):
    from PIL import Image
    path, ref = classifier_file
    imgs = halves_images(9, seed=7)
    labels = [i % 3 for i in range(9)]
    for i, (img, label) in enumerate(zip(imgs, labels)):
        d = tmp_path / 'val' / f'class{label}'
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(d / f'{i}.png')
    cfg = tmp_path / 'recon.py'
    cfg.write_text(CFG.format(base=str(ROOT / 'configs/peco/recon_deit_tiny_in1k.py'),
                              tok=tokenizer_file, vit=VIT, val=str(tmp_path / 'val')))
    out = tmp_path / 'metrics.json'
    run_tool(['tools/test.py', cfg, path, '--work-dir', tmp_path / 'work', '--out', out])
    top1 = json.loads(out.read_text())['accuracy/top1']
    # the same images through the reference classifier on their reconstructions
    model = classifier('ReconstructionViT', tokenizer=tokenizer_file).eval()
    model.load_state_dict(ref.state_dict())
    files = sorted((tmp_path / 'val').glob('*/*.png'))
    x = to_tokenizer_input(np.stack([np.asarray(Image.open(f)) for f in files]))
    with torch.no_grad():
        pred = model(x, mode='tensor').argmax(1)
    want = 100 * float(np.mean([int(p) == int(f.parent.name[-1]) for p, f in zip(pred, files)]))
    assert top1 == pytest.approx(want, abs=1e-4)
