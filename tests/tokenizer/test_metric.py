"""TokenizerMetric numbers: PSNR/SSIM, usage/perplexity and the codeword linear probe."""
import math

import numpy as np
import pytest
import torch

from peco_mm.evaluation import TokenizerMetric


def _sample(img, recon, codes, pooled, label, num_embeddings=8):
    return dict(img=img, recon=recon, codes=codes, pooled_codeword=pooled, gt_label=label,
                num_embeddings=num_embeddings)


def test_metric_numbers():
    g = torch.Generator().manual_seed(0)
    m = TokenizerMetric(num_embeddings=8, probe_epochs=200)
    samples = []
    for i in range(40):
        img = torch.randint(20, 230, (3, 16, 16), generator=g, dtype=torch.uint8)
        recon = (img.int() + 10 * (1 - 2 * (torch.arange(16) % 2))).clamp(0, 255).to(torch.uint8)
        label = i % 2
        pooled = torch.randn(4, generator=g) * 0.1 + torch.tensor([3.0 * label, 0, 0, 0])
        codes = torch.tensor([[i % 4, 0], [1, 1]])  # codes 0..3 used, 4..7 never
        samples.append(_sample(img, recon, codes, pooled, label))
    m.process({}, samples)
    res = m.evaluate(40)
    # every pixel off by exactly 10 grey levels: PSNR = 10 log10(255² / 100)
    assert abs(res['tokenizer/psnr'] - 10 * math.log10(255 ** 2 / 100)) < 1e-6
    assert 0 < res['tokenizer/ssim'] < 1 and 'tokenizer/perceptual' not in res
    assert res['tokenizer/usage'] == 0.5  # 4 of 8 codes
    counts = np.array([10 + 40, 10 + 80, 10, 10], float)  # i % 4, plus 1x code 0, 2x code 1
    p = counts / counts.sum()
    assert abs(res['tokenizer/perplexity'] - math.exp(-(p * np.log(p)).sum())) < 1e-9
    assert res['tokenizer/codeword_probe_acc'] == 100.0  # linearly separable by label
    # identical images: PSNR capped, SSIM 1
    m2 = TokenizerMetric(linear_probe=False)
    img = samples[0]['img']
    m2.process({}, [_sample(img, img.clone(), torch.zeros(1, 1, dtype=torch.long),
                            torch.zeros(4), 0)])
    r2 = m2.evaluate(1)
    assert r2['tokenizer/psnr'] == 100.0 and abs(r2['tokenizer/ssim'] - 1) < 1e-9


def test_classifier_accuracy_on_reconstructions(tmp_path):
    """recon_cls_acc: an mmpretrain classifier (config + checkpoint) run on the uint8 RGB
    reconstructions through its own data preprocessor, as on loaded (BGR) images."""
    import peco_mm  # noqa: F401
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    cfg = tmp_path / 'cls.py'
    cfg.write_text("""
default_scope = 'mmpretrain'
custom_imports = dict(imports=['peco_mm'], allow_failed_imports=False)
model = dict(type='ImageClassifier',
             backbone=dict(type='PeCoViT', embed_dims=32, num_layers=1, num_heads=2,
                           img_size=16, patch_size=8, out_type='avg_featmap', final_norm=False),
             head=dict(type='LinearClsHead', num_classes=3, in_channels=32),
             data_preprocessor=dict(num_classes=3, mean=[120., 110., 100.],
                                    std=[60., 50., 40.], to_rgb=True))
""")
    from mmengine.config import Config
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        clf = MODELS.build(Config.fromfile(cfg).model).eval()
    torch.save(dict(state_dict=clf.state_dict()), tmp_path / 'cls.pth')
    g = torch.Generator().manual_seed(1)
    recons = [torch.randint(0, 256, (3, 16, 16), generator=g, dtype=torch.uint8)
              for _ in range(6)]
    m = TokenizerMetric(classifier=dict(config=str(cfg), checkpoint=str(tmp_path / 'cls.pth')))
    pred = m.classify(recons)
    # by hand: RGB uint8 -> normalised with the RGB mean/std -> logits
    x = (torch.stack(recons).float() - torch.tensor([120., 110., 100.]).view(1, 3, 1, 1)) \
        / torch.tensor([60., 50., 40.]).view(1, 3, 1, 1)
    with torch.no_grad():
        expected = clf(x, mode='tensor').argmax(1).numpy()
    assert np.array_equal(pred, expected)
    m.process({}, [_sample(r, r, torch.zeros(1, 1, dtype=torch.long), torch.zeros(4),
                           int(expected[i]) if i < 4 else int(expected[i] + 1) % 3)
                   for i, r in enumerate(recons)])
    res = m.evaluate(6)
    assert abs(res['tokenizer/recon_cls_acc'] - 100 * 4 / 6) < 1e-6


def test_usage_counts_the_models_codebook_not_the_codes_seen():
    """K comes with the predictions: 4 codes seen of a 16-code codebook is 25 % usage (a
    metric that inferred K from the largest code seen reported 100 %)."""
    g = torch.Generator().manual_seed(0)
    img = torch.randint(0, 256, (3, 8, 8), generator=g, dtype=torch.uint8)
    samples = [_sample(img, img, torch.tensor([[i % 4]]), torch.zeros(2), 0, num_embeddings=16)
               for i in range(8)]
    m = TokenizerMetric(linear_probe=False)
    m.process({}, samples)
    res = m.evaluate(8)
    assert res['tokenizer/usage'] == 0.25 and abs(res['tokenizer/perplexity'] - 4) < 1e-9
    m = TokenizerMetric(num_embeddings=32, linear_probe=False)
    m.process({}, samples)
    with pytest.raises(ValueError, match='num_embeddings=32 but the tokenizer has 16'):
        m.evaluate(8)


def test_perceptual_distance_from_one_fixed_network(tmp_path):
    """The metric's own network measures every tokenizer, whatever (or whether) it was trained
    with: the number equals Eq. 4 of that network on the uint8 images mapped to [-1, 1]."""
    from peco_mm.tokenizer.perceptual import PerceptualLoss
    from tests.tokenizer.test_perceptual import _timm_vit
    path = tmp_path / 'vit.pth'
    torch.save(_timm_vit().state_dict(), path)
    cfg = dict(net='vit', checkpoint=str(path), layers=(2, 4), vit_cfg=dict(num_heads=4))
    g = torch.Generator().manual_seed(0)
    imgs = [torch.randint(0, 256, (3, 32, 32), generator=g, dtype=torch.uint8) for _ in range(5)]
    recons = [(im.int() + torch.randint(-40, 40, im.shape, generator=g)).clamp(0, 255)
              .to(torch.uint8) for im in imgs]
    m = TokenizerMetric(perceptual=cfg, perceptual_batch=2, linear_probe=False)
    m.process({}, [_sample(a, b, torch.zeros(1, 1, dtype=torch.long), torch.zeros(2), 0)
                   for a, b in zip(imgs, recons)])
    res = m.evaluate(5)
    ref = PerceptualLoss(**cfg)
    with torch.no_grad():
        expected = ref(torch.stack(imgs).float() / 127.5 - 1,
                       torch.stack(recons).float() / 127.5 - 1)
    assert res['tokenizer/perceptual'] > 0
    assert abs(res['tokenizer/perceptual'] - float(expected)) < 1e-6 * float(expected)
    with pytest.raises(FileNotFoundError, match='test_evaluator.perceptual.*nope.pth'):
        TokenizerMetric(perceptual=dict(cfg, checkpoint=str(tmp_path / 'nope.pth')))
