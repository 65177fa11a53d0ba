"""The pre-flight compares the backbone's feature strides with the neck's and heads'
(peco_mm.supervisor.strides): the strides it computes are those the built model gives, and a
config whose anchors, RoI extractors or decode head assume other maps is refused naming the
key to change and its value."""
import subprocess
import sys

import pytest
import torch

from peco_mm.supervisor import preflight, strides
from tests.conftest import ROOT

DEMO = ROOT / 'configs' / 'demo' / 'mask_rcnn_tiny_shapes.py'
# the demo as it was: 8 px patches through the 4x / 2x / 1x / 0.5x adapter (strides 2-16)
OLD_DEMO = (f"_base_ = '{DEMO}'\n"
            'model = dict(backbone=dict(pyramid=dict(scales=(4, 2, 1, 0.5))))\n')
ANCHORS = 'model.rpn_head.anchor_generator.strides'
ROI_KEYS = ['model.roi_head.bbox_roi_extractor.featmap_strides',
            'model.roi_head.mask_roi_extractor.featmap_strides']


def _config(tmp_path, text: str):
    path = tmp_path / 'cfg.py'
    path.write_text(text)
    return preflight.load(str(path))


def _stride_problems(cfg):
    return strides.problems(cfg, preflight.Problem)


def test_the_old_demo_is_refused_naming_each_key_and_the_fix(tmp_path):
    problems = _stride_problems(_config(tmp_path, OLD_DEMO))
    assert [p.key for p in problems] == [ANCHORS] + ROI_KEYS
    text = preflight.report(problems)
    assert (f'{ANCHORS}=[4, 8, 16, 32, 64] but the feature maps it gets are at strides '
            '[2, 4, 8, 16, 32] (model.backbone.patch_size=8 with model.backbone.pyramid '
            'scales (4, 2, 1, 0.5), model.neck FPN (+1 level at 2x))') in text
    assert f'Fix: --cfg-options {ANCHORS}="[2, 4, 8, 16, 32]", or ' \
           'model.backbone.pyramid.scales="(2, 1, 0.5, 0.25)"' in text
    assert f'{ROI_KEYS[0]}=[4, 8, 16, 32] but the feature maps it gets are at strides ' \
           '[2, 4, 8, 16]' in text
    # the fix it names passes
    fixed = _config(tmp_path, OLD_DEMO.replace(
        '0.5))))', '0.5))), rpn_head=dict(anchor_generator=dict(strides=[2, 4, 8, 16, 32])), '
        'roi_head=dict(bbox_roi_extractor=dict(featmap_strides=[2, 4, 8, 16]), '
        'mask_roi_extractor=dict(featmap_strides=[2, 4, 8, 16])))'))
    assert fixed.model.rpn_head.anchor_generator.type == 'AnchorGenerator'
    assert fixed.model.roi_head.mask_roi_extractor.featmap_strides == [2, 4, 8, 16]
    assert _stride_problems(fixed) == []


def test_train_py_refuses_the_old_demo_before_anything_starts(tmp_path):
    """Through the launcher's light pre-flight (preflight.py loaded by its path, no torch)."""
    (tmp_path / 'old.py').write_text(OLD_DEMO)
    proc = subprocess.run([sys.executable, str(ROOT / 'tools/train.py'), str(tmp_path / 'old.py'),
                           '--preflight-only'], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1
    assert 'Traceback' not in proc.stderr
    assert f'{ANCHORS}=[4, 8, 16, 32, 64] but the feature maps' in proc.stderr


@pytest.mark.parametrize('text', [f"_base_ = '{DEMO}'\n", OLD_DEMO,
                                  f"_base_ = '{DEMO}'\nmodel = dict(backbone=dict(patch_size=16,"
                                  ' pyramid=dict(scales=(4, 2, 1, 0.5))))\n'],
                         ids=['demo', 'old_demo', 'patch16'])
@torch.no_grad()
def test_computed_strides_are_the_built_models(text, tmp_path):
    """The strides the check derives from the config are those of mmdet's built Mask R-CNN:
    input size over each FPN output's size."""
    from mmdet.registry import MODELS
    from mmengine.registry import DefaultScope
    import peco_mm  # noqa: F401  registers PeCoViT
    cfg = _config(tmp_path, text)
    maps, _ = strides.neck_maps(cfg.model.neck, *strides.backbone_maps(cfg.model))
    cfg.model.backbone.init_cfg = None
    with DefaultScope.overwrite_default_scope('mmdet'):
        model = MODELS.build(cfg.model).eval()
    feats = model.extract_feat(torch.zeros(1, 3, 64, 128))  # (1, C, h, w) per level
    assert [64 / f.shape[-2] for f in feats] == maps
    assert [128 / f.shape[-1] for f in feats] == maps


def _seg_model(extra: str) -> str:
    return ("model = dict(type='EncoderDecoder', backbone=dict(type='PeCoViT', patch_size=16, "
            "out_type='featmap', out_indices=(1, 3, 5, 7)), neck=[dict(type='ViTPyramidAdapter',"
            " scales=(4, 2, 1, 0.5)), dict(type='FPN', in_channels=[768] * 4, out_channels=256, "
            f'num_outs=4)], {extra})\n')


@pytest.mark.parametrize('head, key, message', [
    ("decode_head=dict(type='FPNHead', in_index=[0, 1, 2, 3], feature_strides=[8, 16, 32, 64])",
     'model.decode_head.feature_strides',
     'model.decode_head.feature_strides=[8, 16, 32, 64] but the feature maps it gets are at '
     'strides [4, 8, 16, 32] (model.backbone.patch_size=16, model.neck[0] ViTPyramidAdapter '
     'scales (4, 2, 1, 0.5), model.neck[1] FPN)'),
    ("decode_head=dict(type='UPerHead', in_index=[0, 1, 2, 3]), auxiliary_head=dict("
     "type='FCNHead', in_index=4)", 'model.auxiliary_head.in_index',
     'model.auxiliary_head.in_index=4 but the backbone gives 4 feature maps'),
])
def test_a_decode_head_on_other_maps_is_named(head, key, message, tmp_path):
    """The adapter as a neck (not the backbone's pyramid) followed by mmseg's FPN."""
    problems = _stride_problems(_config(tmp_path, _seg_model(head)))
    assert [p.key for p in problems] == [key]
    assert problems[0].message.startswith(message)


def test_what_is_not_stated_is_not_judged(tmp_path):
    """Another backbone, an unknown neck, a head that states no strides: nothing reported."""
    other = "model = dict(backbone=dict(type='ResNet'), rpn_head=dict(anchor_generator=dict(" \
            "strides=[1, 2])))\n"
    unknown = _seg_model("decode_head=dict(type='FPNHead', feature_strides=[1, 1, 1, 1])") \
        .replace("type='FPN'", "type='PAFPN'")
    plain = _seg_model("decode_head=dict(type='UPerHead', in_index=[0, 1, 2, 3])")
    for text in (other, unknown, plain):
        assert _stride_problems(_config(tmp_path, text)) == []
