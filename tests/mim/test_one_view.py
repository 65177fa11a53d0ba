"""The pretraining pipeline resizes a crop once when the tokenizer reads the ViT's size:
mmpretrain's two-view crop gives two identical arrays then, and `OneViewTwoNormDataPreprocessor`
on the one view equals mmpretrain's `TwoNormDataPreprocessor` on the two, bit for bit."""
import glob
import random

import numpy as np
import pytest
import torch
from mmengine.config import Config

from tests.conftest import ROOT

CROP = 'RandomResizedCropAndInterpolationWithTwoPic'
NORM = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
            second_mean=[127.5] * 3, second_std=[127.5] * 3, to_rgb=True)


def photo(seed: int, hw=(375, 500)) -> np.ndarray:
    import cv2
    rng = np.random.default_rng(seed)
    return cv2.GaussianBlur(rng.integers(0, 256, (*hw, 3), dtype=np.uint8), (0, 0), 2)


@pytest.mark.parametrize('interpolation', ['bicubic', 'bilinear'])
def test_the_second_resize_of_the_reference_crop_repeats_the_first(interpolation):
    from mmpretrain.datasets.transforms import RandomResizedCropAndInterpolationWithTwoPic
    two = RandomResizedCropAndInterpolationWithTwoPic(
        224, second_size=224, interpolation=interpolation, second_interpolation=interpolation)
    one = RandomResizedCropAndInterpolationWithTwoPic(224, interpolation=interpolation)
    for seed in range(5):
        img = photo(seed)
        np.random.seed(seed)
        view, target = two.transform(dict(img=img))['img']
        np.random.seed(seed)
        single = one.transform(dict(img=img))['img']
        assert np.array_equal(view, target) and np.array_equal(view, single)
    # a different tokenizer size or interpolation is a different view: two stay needed
    lanczos = RandomResizedCropAndInterpolationWithTwoPic(
        224, second_size=224, interpolation='bicubic', second_interpolation='lanczos')
    view, target = lanczos.transform(dict(img=photo(0)))['img']
    assert not np.array_equal(view, target)


def test_one_view_preprocessor_equals_mmpretrain_two_norm_on_two_copies():
    from mmpretrain.models.utils import TwoNormDataPreprocessor

    from peco_mm.models.data_preprocessor import OneViewTwoNormDataPreprocessor
    ref, ours = TwoNormDataPreprocessor(**NORM), OneViewTwoNormDataPreprocessor(**NORM)
    x = torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8)
    y = torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8)
    want = ref(dict(inputs=[x, x.clone()], data_samples=None))['inputs']
    for inputs in (x, [x]):  # a collated batch, or a list holding one
        got = ours(dict(inputs=inputs, data_samples=None))['inputs']
        assert len(got) == 2 and all(torch.equal(g, w) for g, w in zip(got, want))
    # two views: mmpretrain's path, unchanged
    got = ours(dict(inputs=[x, y], data_samples=None))['inputs']
    want = ref(dict(inputs=[x, y], data_samples=None))['inputs']
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    with pytest.raises(ValueError, match='3 views'):
        ours(dict(inputs=[x, x, x], data_samples=None))


def test_one_view_and_two_views_give_the_same_peco_loss(images, tokenizer_ckpt):
    # the same crop through the shipped one-view pipeline and the two-view one: same loss
    from mmengine.dataset import Compose, default_collate
    from mmpretrain.registry import MODELS

    from peco_mm.datasets.mim_transforms import BlockwiseMaskGenerator  # noqa: F401
    cfg = Config.fromfile(ROOT / 'configs/peco/pretrain_vitb_in1k_300e.py')
    model_cfg = dict(cfg.model.to_dict(), data_preprocessor=cfg.data_preprocessor.to_dict())
    model_cfg['backbone'].update(arch='test', img_size=32, patch_size=8, drop_path_rate=0.0)
    model_cfg['target_generator'].update(checkpoint=tokenizer_ckpt[0], channels_last=False)
    torch.manual_seed(0)
    model = MODELS.build(model_cfg)
    assert type(model.data_preprocessor).__name__ == 'OneViewTwoNormDataPreprocessor'
    losses = []
    for second in (None, 32):
        pipe = Compose([dict(type=CROP, size=32, second_size=second, interpolation='bicubic',
                             second_interpolation='bicubic', scale=(0.3, 1.0)),
                        dict(type='BlockwiseMaskGenerator', input_size=4, num_masking_patches=6,
                             min_num_patches=2),
                        dict(type='PackInputs')])
        np.random.seed(0)
        random.seed(0)
        batch = default_collate([pipe(dict(img=img[..., ::-1].copy())) for img in images[1][:8]])
        data = model.data_preprocessor(batch, training=True)
        with torch.no_grad():
            losses.append(model.loss(data['inputs'], data['data_samples'])['loss'])
    assert torch.equal(losses[0], losses[1]) and losses[0] > 0


def test_every_shipped_one_view_pipeline_has_a_preprocessor_that_takes_one_view():
    checked = 0
    for path in sorted(glob.glob(str(ROOT / 'configs/**/pretrain_*.py'), recursive=True)):
        cfg = Config.fromfile(path)
        crop = next((t for t in cfg.train_dataloader.dataset.pipeline if t['type'] == CROP),
                    None)
        if crop is None:
            continue
        pre = cfg.get('data_preprocessor') or cfg.model.get('data_preprocessor') or {}
        checked += 1
        same = (crop.get('second_size') == crop['size'] and crop.get(
            'second_interpolation', 'lanczos') == crop.get('interpolation', 'bilinear'))
        if crop.get('second_size') is None:
            assert pre.get('type') in ('OneViewTwoNormDataPreprocessor',
                                       'SelfSupDataPreprocessor'), path
        else:  # a second resize only where it differs from the first
            assert not same, f'{path}: second_size={crop["second_size"]} repeats the first view'
    assert checked >= 5
