"""Tokenizer evaluation (PeCo Sec. 4.3, Table 4) for `tools/test.py` with a tokenizer config:

- reconstruction quality: PSNR and SSIM (scikit-image's implementations, on uint8 RGB) and the
  perceptual distance (Eq. 4) measured with ONE network fixed by the metric's `perceptual`
  key, whatever network (if any) the tokenizer was trained with, so tokenizers trained with
  different λ (λ = 0 included) or perceptual networks are compared on one scale;
- codebook health on the evaluation set: usage (fraction of the K codes chosen; K from the
  model) and perplexity (`peco_mm.layers.quantizer.codebook_stats`, as logged in training);
- the linear probe on codewords: average-pooled quantised codewords of each image feed a
  linear classifier. The paper trains it on ImageNet train and tests on val; here it is
  cross-validated over the evaluation set (`probe_folds` folds), so it needs labels and
  runs in seconds — a proxy of Table 4's numbers, comparable across tokenizers;
- optionally, the top-1 accuracy of a given mmpretrain classifier on the reconstructions
  (Table 4's second column): `classifier=dict(config=..., checkpoint=...)`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from mmengine.evaluator import BaseMetric

from ..layers.quantizer import codebook_stats
from ..registry import METRICS

PSNR_CAP = 100.0  # identical images have infinite PSNR


@METRICS.register_module()
class TokenizerMetric(BaseMetric):
    """PSNR / SSIM / perceptual distance / usage / perplexity / codeword linear probe.

    Args:
        num_embeddings: codebook size K for usage; by default the model's (its predictions
            carry it); given, it must agree with the model's.
        perceptual: `PerceptualLoss` arguments of the fixed network that measures the
            perceptual distance between images and reconstructions, e.g.
            dict(net='vit', checkpoint=PATH, layers=(3, 6, 9, 12)); None: no distance.
        perceptual_batch, perceptual_device: images per forward of that network, and its
            device (default: CUDA when available).
        linear_probe: run the codeword linear probe when labels are there.
        probe_folds, probe_epochs, probe_lr: cross-validation folds and full-batch Adam
            schedule of the probe (logistic regression on standardised features).
        classifier: optional dict(config=..., checkpoint=...) of an mmpretrain classifier
            whose top-1 accuracy on the reconstructions is reported.
    """
    default_prefix = 'tokenizer'

    def __init__(self, num_embeddings: int | None = None, perceptual: dict | None = None,
                 perceptual_batch: int = 32, perceptual_device: str | None = None,
                 linear_probe: bool = True,
                 probe_folds: int = 2, probe_epochs: int = 300, probe_lr: float = 0.05,
                 classifier: dict | None = None, collect_device: str = 'cpu',
                 prefix: str | None = None) -> None:
        super().__init__(collect_device=collect_device, prefix=prefix)
        if probe_folds < 2:
            raise ValueError(f'probe_folds={probe_folds} must be >= 2')
        self.num_embeddings = num_embeddings
        self.perceptual_batch = perceptual_batch
        self.perceptual = None
        if perceptual:  # built now: a missing checkpoint fails before the test loop
            from ..tokenizer.perceptual import PerceptualLoss
            try:
                self.perceptual = PerceptualLoss(**perceptual)
            except (FileNotFoundError, ValueError) as err:
                raise type(err)(f'test_evaluator.perceptual: {err}') from err
            self.perceptual.to(perceptual_device or ('cuda' if torch.cuda.is_available()
                                                     else 'cpu'))
        self.linear_probe = linear_probe
        self.probe_folds = probe_folds
        self.probe_epochs = probe_epochs
        self.probe_lr = probe_lr
        self.classifier_cfg = classifier
        self._classifier = None

    def process(self, data_batch, data_samples: Sequence[dict]) -> None:
        from skimage.metrics import peak_signal_noise_ratio, structural_similarity
        cls_pred = self.classify([s['recon'] for s in data_samples])
        percep = self.perceptual_distance([s['img'] for s in data_samples],
                                          [s['recon'] for s in data_samples])
        for i, s in enumerate(data_samples):
            img = s['img'].permute(1, 2, 0).numpy()
            rec = s['recon'].permute(1, 2, 0).numpy()
            with np.errstate(divide='ignore'):  # identical images: inf, capped below
                psnr = peak_signal_noise_ratio(img, rec, data_range=255)
            ssim = structural_similarity(img, rec, channel_axis=2, data_range=255,
                                         win_size=min(7, *img.shape[:2]) // 2 * 2 + 1)
            r = dict(psnr=min(float(psnr), PSNR_CAP), ssim=float(ssim),
                     codes=s['codes'].flatten().numpy().astype(np.int64),
                     pooled=s['pooled_codeword'].numpy(),
                     num_embeddings=s.get('num_embeddings'))
            if percep is not None:
                r['perceptual'] = float(percep[i])
            if 'gt_label' in s:
                r['label'] = int(s['gt_label'])
            if cls_pred is not None:
                r['recon_pred'] = int(cls_pred[i])
            self.results.append(r)

    def compute_metrics(self, results: list) -> dict:
        out = dict(psnr=float(np.mean([r['psnr'] for r in results])),
                   ssim=float(np.mean([r['ssim'] for r in results])))
        if all('perceptual' in r for r in results):
            out['perceptual'] = float(np.mean([r['perceptual'] for r in results]))
        codes = np.concatenate([r['codes'] for r in results])
        K = self.codebook_size(results, codes)
        out.update(codebook_stats(torch.from_numpy(np.bincount(codes, minlength=K))))
        labelled = [r for r in results if 'label' in r]
        if self.linear_probe and len(labelled) == len(results):
            labels = np.array([r['label'] for r in results])
            if len(np.unique(labels)) >= 2 and len(results) >= 2 * self.probe_folds:
                feats = np.stack([r['pooled'] for r in results])
                out['codeword_probe_acc'] = 100 * self.codeword_probe(feats, labels)
        if labelled and all('recon_pred' in r for r in labelled):
            acc = np.mean([r['recon_pred'] == r['label'] for r in labelled])
            out['recon_cls_acc'] = 100 * float(acc)
        return out

    # ---- steps ------------------------------------------------------------------------------
    def codebook_size(self, results: list, codes: np.ndarray) -> int:
        """K: the model's (carried by its predictions), else `num_embeddings`; both given
        must agree, and every code must lie below K."""
        from_model = {r['num_embeddings'] for r in results if r.get('num_embeddings')}
        if len(from_model) > 1:
            raise ValueError(f'TokenizerMetric: predictions of codebooks of sizes {from_model}')
        K = from_model.pop() if from_model else self.num_embeddings
        if K is None:
            raise ValueError('TokenizerMetric: codebook size unknown: set '
                             'test_evaluator.num_embeddings=K')
        if self.num_embeddings is not None and K != self.num_embeddings:
            raise ValueError(f'test_evaluator.num_embeddings={self.num_embeddings} but the '
                             f'tokenizer has {K} codes; drop the key or set it to {K}')
        if codes.size and int(codes.max()) >= K:
            raise ValueError(f'TokenizerMetric: code {int(codes.max())} >= codebook size {K}')
        return int(K)

    @torch.no_grad()
    def perceptual_distance(self, imgs: list[torch.Tensor], recons: list[torch.Tensor]
                            ) -> np.ndarray | None:
        """Eq. 4 per image with the metric's fixed network, on the uint8 RGB (3, H, W) images
        and reconstructions mapped back to [-1, 1]: (N,), or None without a network."""
        if self.perceptual is None:
            return None
        out = []
        for s in range(0, len(imgs), self.perceptual_batch):
            dev = self.perceptual.mean.device
            x = torch.stack(imgs[s:s + self.perceptual_batch]).to(dev).float() / 127.5 - 1
            y = torch.stack(recons[s:s + self.perceptual_batch]).to(dev).float() / 127.5 - 1
            out.append(self.perceptual(x, y, reduce=False).double().cpu().numpy())
        return np.concatenate(out)

    def codeword_probe(self, feats: np.ndarray, labels: np.ndarray) -> float:
        """Cross-validated accuracy of a linear classifier on pooled codewords (Table 4)."""
        x = torch.from_numpy(feats).double()
        y = torch.from_numpy(labels).long()
        classes, y = torch.unique(y, return_inverse=True)
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
        folds = [order[i::self.probe_folds] for i in range(self.probe_folds)]
        correct = 0
        for k, test_idx in enumerate(folds):
            train_idx = torch.cat([f for j, f in enumerate(folds) if j != k])
            mu, sd = x[train_idx].mean(0), x[train_idx].std(0).clamp_min(1e-6)
            xtr, xte = (x[train_idx] - mu) / sd, (x[test_idx] - mu) / sd
            lin = torch.nn.Linear(x.shape[1], len(classes)).double()
            opt = torch.optim.Adam(lin.parameters(), lr=self.probe_lr, weight_decay=1e-4)
            for _ in range(self.probe_epochs):
                opt.zero_grad()
                F.cross_entropy(lin(xtr), y[train_idx]).backward()
                opt.step()
            with torch.no_grad():
                correct += int((lin(xte).argmax(1) == y[test_idx]).sum())
        return correct / len(y)

    def classify(self, recons: list[torch.Tensor]) -> np.ndarray | None:
        """Top-1 predictions of the configured classifier on uint8 RGB reconstructions."""
        if not self.classifier_cfg:
            return None
        if self._classifier is None:
            from mmpretrain.apis import get_model
            cfg = self.classifier_cfg
            self._classifier = get_model(cfg['config'], pretrained=cfg.get('checkpoint', True),
                                         device=cfg.get('device', 'cpu')).eval()
        model = self._classifier
        # mmpretrain preprocessors take BGR uint8 (mmcv's loader order) and convert
        pre = model.data_preprocessor
        bgr_in = getattr(pre, 'to_rgb', False) or getattr(pre, '_channel_conversion', False)
        batch = [r.flip(0) if bgr_in else r for r in recons]
        with torch.no_grad():
            data = model.data_preprocessor(dict(inputs=batch), False)
            logits = model(data['inputs'], mode='tensor')
        return logits.argmax(1).cpu().numpy()
