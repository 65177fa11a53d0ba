"""Every shipped config parses and its model builds (pretrained paths switched off, sizes as
shipped, so this also catches a ViT-B config that no longer matches its heads)."""
import copy
import functools
from pathlib import Path

import pytest
from mmengine.config import Config
from mmengine.registry import DefaultScope

import peco_mm  # noqa: F401
from peco_mm.supervisor.config_keys import check_config_keys, check_run_keys

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(p for p in (ROOT / 'configs').rglob('*.py') if '_base_' not in p.parts)
SHIPPED = [p for p in CONFIGS if p.parent.name == 'peco']


@functools.lru_cache(maxsize=None)
def _load(path: Path) -> Config:
    """A config as loaded once in this process (tests copy what they change)."""
    return Config.fromfile(str(path))


def _drop_pretrained(node):
    """Set every init_cfg=dict(type='Pretrained', ...) to None, in place."""
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, dict) and v.get('type') == 'Pretrained':
                node[k] = None
            else:
                _drop_pretrained(v)
    elif isinstance(node, list):
        for v in node:
            _drop_pretrained(v)


@pytest.mark.parametrize('path', CONFIGS, ids=lambda p: str(p.relative_to(ROOT / 'configs')))
def test_config_builds(path):
    cfg = _load(path)
    assert cfg.get('default_scope'), f'{path.name}: no default_scope'
    # a stalled rank ends the job after 10 minutes (NCCL's default: 30)
    assert cfg.env_cfg.dist_cfg.timeout == 600, f'{path.name}: env_cfg {cfg.env_cfg}'
    # no key of the shipped configs is taken for a typo
    check_config_keys(cfg)
    check_run_keys(cfg)
    scope = cfg.default_scope
    registry = __import__(f'{scope}.registry', fromlist=['MODELS'])
    model_cfg = copy.deepcopy(cfg.model)
    _drop_pretrained(model_cfg)
    with DefaultScope.overwrite_default_scope(scope):
        try:
            model = registry.MODELS.build(model_cfg)
        except (FileNotFoundError, ValueError) as e:
            # frozen parts that need user weights (perceptual net, tokenizer target) refuse
            # to build without them; the error must say which key to set
            assert 'set ' in str(e) and ('checkpoint' in str(e)), str(e)
            return
    assert sum(p.numel() for p in model.parameters()) > 0


@pytest.mark.parametrize('path', CONFIGS, ids=lambda p: str(p.relative_to(ROOT / 'configs')))
def test_feature_strides_agree_with_the_heads(path):
    """The pre-flight's stride check passes, and judges every detector and segmentor (their
    backbone's strides are known: PeCoViT, its pyramid, the adapter or FPN necks)."""
    from peco_mm.supervisor import preflight, strides
    cfg = _load(path)
    assert [p.message for p in strides.problems(cfg, preflight.Problem)] == []
    model = cfg.get('model') or {}
    if model.get('rpn_head') or model.get('decode_head'):
        found = strides.backbone_maps(model)
        assert found and strides.neck_maps(model.get('neck'), *found), path.name


@pytest.mark.parametrize('path', SHIPPED, ids=lambda p: p.name)
def test_auto_scale_lr_is_the_stated_total_batch(path):
    """`--auto-scale-lr` multiplies the lr by (GPUs x batch) / auto_scale_lr.base_batch_size:
    the base must be the total batch the lr is stated for, `recipe_gpus` x the per-GPU batch
    x the gradient accumulation (a linear probe kept the host's 1024 for its lr of batch
    16384: 16x too high an lr on every GPU count)."""
    cfg = _load(path)
    gpus = cfg.get('recipe_gpus')
    assert isinstance(gpus, int) and gpus > 0, f'{path.name}: no recipe_gpus'
    total = (gpus * cfg.train_dataloader.batch_size
             * cfg.optim_wrapper.get('accumulative_counts', 1))
    assert cfg.auto_scale_lr.base_batch_size == total, (
        f'{path.name}: auto_scale_lr.base_batch_size={cfg.auto_scale_lr.base_batch_size}, '
        f'stated total batch {total}')
    if path.name.startswith('linear_'):  # MAE's protocol: lr 0.1 x total / 256
        assert cfg.optim_wrapper.optimizer.lr == pytest.approx(0.1 * total / 256)


def test_no_single_view_transform_after_the_two_view_crop():
    """After RandomResizedCropAndInterpolationWithTwoPic a sample holds two views, which
    mmpretrain's RandomFlip and colour transforms do not take: such a step must come before
    the crop (a flip after it failed on every flipped image of the PeCo_MAE config)."""
    crop, checked, wrong = 'RandomResizedCropAndInterpolationWithTwoPic', [], {}
    for path in CONFIGS:
        loader = Config.fromfile(str(path)).get('train_dataloader') or {}
        steps = [t['type'] for t in (loader.get('dataset') or {}).get('pipeline') or []]
        if crop in steps:
            checked.append(path.name)
            after = set(steps[steps.index(crop) + 1:])
            if not after <= {'BlockwiseMaskGenerator', 'RandomMaskGenerator', 'PackInputs'}:
                wrong[path.name] = sorted(after)
    assert 'pretrain_mae_vitb_in1k_800e.py' in checked and len(checked) >= 10, checked
    assert not wrong, f'single-view transforms after the two-view crop: {wrong}'
