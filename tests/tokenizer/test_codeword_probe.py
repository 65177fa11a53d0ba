"""Table 4's codeword linear probe: the frozen tokenizer's average-pooled quantized codewords
as an mmpretrain backbone, and the shipped probe config trained and scored by mmpretrain's
Accuracy through tools/train.py on images the test writes."""
import re

import numpy as np
import pytest
import torch

from tests.conftest import ROOT, run_tool, scalars
from tests.mim.conftest import fitted_tokenizer, halves_images, save_tokenizer, \
    to_tokenizer_input

from peco_mm.tokenizer import CodewordPoolBackbone


@pytest.fixture(scope='module')
def tokenizer_file(tmp_path_factory):
    path = tmp_path_factory.mktemp('tok') / 'tokenizer.pth'
    return save_tokenizer(fitted_tokenizer(halves_images(64)), str(path))


def test_features_are_pooled_codewords(tokenizer_file):
    backbone = CodewordPoolBackbone(tokenizer_file, channels_last=False)
    backbone.train()
    assert not backbone.tokenizer.training
    assert not any(p.requires_grad for p in backbone.parameters())
    img = to_tokenizer_input(halves_images(4, seed=3))
    (feats,) = backbone(img)
    tok = backbone.tokenizer
    codes = tok.encode(img)  # (4, 4, 4)
    want = torch.stack([tok.quantizer.embedding[c.flatten()].mean(0) for c in codes])
    assert feats.shape == (4, 16) and torch.allclose(feats, want, atol=1e-6)
    # images of other colours give other codes, hence other features
    # different images, different codes, different features
    assert not torch.equal(codes[0], codes[1]) and (feats[0] - feats[1]).abs().max() > 1e-3


def test_missing_checkpoint_names_the_key():
    with pytest.raises(FileNotFoundError, match='model.backbone.checkpoint'):
        CodewordPoolBackbone('nowhere.pth')


PROBE_CFG = '''
_base_ = {base!r}
model = dict(backbone=dict(checkpoint={tok!r}, channels_last=False),
             neck=dict(input_features=16), head=dict(in_channels=16, num_classes=3))
pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
train_dataloader = dict(batch_size=6, num_workers=0, persistent_workers=False,
                        dataset=dict(_delete_=True, type='CustomDataset', data_root={train!r},
                                     pipeline=pipeline))
val_dataloader = dict(batch_size=6, num_workers=0, persistent_workers=False,
                      dataset=dict(_delete_=True, type='CustomDataset', data_root={val!r},
                                   pipeline=pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_evaluator = val_evaluator
# LARS (the config's) moves a 0.01-std head too little in 60 steps; SGD for the toy run
optim_wrapper = dict(optimizer=dict(_delete_=True, type='SGD', lr=0.5, momentum=0.9))
param_scheduler = []
train_cfg = dict(max_epochs=20, val_interval=20)
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=20))
randomness = dict(seed=0)
'''


def test_probe_config_trains_and_scores_with_mmpretrain_accuracy(tmp_path, tokenizer_file):
    from PIL import Image
    rng = np.random.default_rng(0)
    for split, n in (('train', 6), ('val', 3)):  # three colours, the tokenizer's palette
        for c, colour in enumerate([(230, 25, 75), (60, 180, 75), (0, 130, 200)]):
            d = tmp_path / split / f'class{c}'
            d.mkdir(parents=True)
            for i in range(n):
                img = np.clip(np.array(colour) + rng.integers(-5, 5, (32, 32, 3)), 0, 255)
                Image.fromarray(img.astype(np.uint8)).save(d / f'{i}.png')
    cfg = tmp_path / 'probe.py'
    cfg.write_text(PROBE_CFG.format(base=str(ROOT / 'configs/peco/linear_codewords_in1k.py'),
                                    tok=tokenizer_file, train=str(tmp_path / 'train'),
                                    val=str(tmp_path / 'val')))
    out = run_tool(['tools/train.py', cfg, '--work-dir', tmp_path / 'wd'])
    acc = [r['accuracy/top1'] for r in scalars(tmp_path / 'wd') if 'accuracy/top1' in r]
    # three colours whose codewords differ (the toy tokenizer's codes also follow the noise):
    # at least 7 of the 9 val images right, chance is 3 (8 with this seed)
    assert acc and acc[-1] > 70.0, (acc, re.findall(r'loss: [\d.]+', out.stdout)[-5:])
