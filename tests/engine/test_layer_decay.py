"""Layer-decay groups and lr scales against the closed form rate ** (L + 1 - depth), and
against mmpretrain's layer-decay constructor and BEiT recipes (lr scales, weight decay)."""
import pytest
import torch.nn as nn
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS

import peco_mm  # noqa: F401
from peco_mm.engine import layer_decay_param_groups
from peco_mm.models import PeCoViT


class Classifier(nn.Module):

    def __init__(self):
        super().__init__()
        self.backbone = PeCoViT(arch='test', num_layers=3, img_size=32,
                                patch_size=8, qkv_bias='qv',
                                rel_pos_bias='per_block', out_type='avg_featmap',
                                final_norm=False)
        self.head = nn.Linear(64, 10)


def expected_depth(name):
    n = name[len('backbone.'):] if name.startswith('backbone.') else None
    if n is None:
        return 4  # heads: L + 1
    if n in ('cls_token', 'pos_embed') or n.startswith('patch_embed'):
        return 0
    if n.startswith('blocks.'):
        return int(n.split('.')[1]) + 1
    return 4


def test_groups_match_closed_form():
    model = Classifier()
    rate, lr, wd = 0.65, 4e-3, 0.05
    ctor = OPTIM_WRAPPER_CONSTRUCTORS.build(dict(
        type='LayerDecayOptimWrapperConstructor',
        optim_wrapper_cfg=dict(optimizer=dict(type='AdamW', lr=lr, weight_decay=wd)),
        paramwise_cfg=dict(layer_decay_rate=rate)))
    optim = ctor(model).optimizer
    seen = {}
    for group in optim.param_groups:
        for p in group['params']:
            seen[id(p)] = group
    names = dict(model.named_parameters())
    assert len(seen) == len(names)
    nwd = {'backbone.' + n for n in model.backbone.no_weight_decay()}
    for name, p in names.items():
        g = seen[id(p)]
        depth = expected_depth(name)
        assert g['lr'] == pytest.approx(lr * rate ** (4 - depth)), name
        no_decay = p.ndim == 1 or name in nwd
        assert g['weight_decay'] == (0.0 if no_decay else wd), name
    # the deepest groups keep the full lr, the patch embedding gets rate ** 4
    assert seen[id(names['head.weight'])]['lr'] == pytest.approx(lr)
    assert seen[id(names['backbone.patch_embed.proj.weight'])]['lr'] == pytest.approx(
        lr * rate**4)
    assert seen[id(names['backbone.blocks.0.rel_pos_bias.relative_position_bias_table'])][
        'weight_decay'] == wd  # decayed, as BEiT's fine-tuning decays it


def test_custom_keys_multiply_and_frozen_params_skipped():
    model = Classifier()
    model.backbone.patch_embed.requires_grad_(False)
    groups = layer_decay_param_groups(model, 1.0, 0.1, 0.5,
                                      custom_keys={'head': dict(lr_mult=10.0, decay_mult=0.0)})
    head = [g for g in groups if 'head.weight' in g['param_names']][0]
    assert head['lr'] == pytest.approx(10.0) and head['weight_decay'] == 0.0
    assert not any(n.startswith('backbone.patch_embed') for g in groups
                   for n in g['param_names'])


def test_model_without_depth_protocol_is_refused():
    with pytest.raises(TypeError, match='get_layer_depth'):
        layer_decay_param_groups(nn.Sequential(nn.Linear(2, 2)), 1.0, 0.0, 0.5)


def test_unknown_paramwise_key_is_refused():
    with pytest.raises(KeyError, match="unknown paramwise_cfg keys \\['layer_decay'\\]"):
        OPTIM_WRAPPER_CONSTRUCTORS.build(dict(
            type='LayerDecayOptimWrapperConstructor',
            optim_wrapper_cfg=dict(optimizer=dict(type='AdamW', lr=1e-3)),
            paramwise_cfg=dict(layer_decay=0.65)))


def _decay_by_kind(model: nn.Module, optimizer) -> dict[str, bool]:
    """{parameter kind: decayed?} from an optimizer's groups, with one answer per kind."""
    group_of = {id(p): g for g in optimizer.param_groups for p in g['params']}
    kinds = ('cls_token', 'mask_token', 'pos_embed', 'relative_position_bias_table', 'q_bias',
             'v_bias', 'gamma')
    out = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:  # frozen (fixed sin-cos tables): in no group
            continue
        kind = next((k for k in kinds if k in name), None) or (
            'norm' if '.ln' in name or 'norm' in name else
            'bias' if name.endswith('.bias') else 'weight')
        decayed = group_of[id(p)]['weight_decay'] > 0
        assert out.setdefault(kind, decayed) == decayed, f'{kind}: {name} differs'
    return out


class _Algorithm(nn.Module):
    """An algorithm's parameter names (`backbone.*`, `neck.*`) and the backbone's depths."""

    def __init__(self, backbone: nn.Module, neck: nn.Module | None = None):
        super().__init__()
        self.backbone, self.neck = backbone, neck

    def get_layer_depth(self, name: str, prefix: str = 'backbone.'):
        return self.backbone.get_layer_depth(name, prefix)


def _mmpretrain_decay(recipe: str, model: nn.Module) -> dict[str, bool]:
    """`_decay_by_kind` of the optimizer that mmpretrain's config `recipe` builds (its own
    constructor, in its scope) for `model`."""
    return _decay_by_kind(model, _mmpretrain_optimizer(recipe, model))


def _mmpretrain_optimizer(recipe: str, model: nn.Module):
    """The optimizer that mmpretrain's config `recipe` builds for `model`."""
    import mmpretrain
    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import OPTIM_WRAPPER_CONSTRUCTORS as MMPRETRAIN_CONSTRUCTORS
    cfg = Config.fromfile(f'{mmpretrain.__path__[0]}/.mim/configs/{recipe}')
    ow = dict(cfg.optim_wrapper, type='OptimWrapper')
    for k in ('loss_scale', 'dtype'):
        ow.pop(k, None)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        wrapper = MMPRETRAIN_CONSTRUCTORS.build(dict(
            type=ow.pop('constructor', 'DefaultOptimWrapperConstructor'),
            optim_wrapper_cfg=ow, paramwise_cfg=ow.pop('paramwise_cfg')))(model)
    return wrapper.optimizer


def _shipped_decay(config: str, model: nn.Module) -> dict[str, bool]:
    """`_decay_by_kind` of the optimizer that our shipped `config` builds for `model`."""
    return _decay_by_kind(model, _shipped_optimizer(config, model))


def _shipped_optimizer(config: str, model: nn.Module):
    """The optimizer that our shipped `config` builds for `model`."""
    from mmengine.config import Config

    from tests.conftest import ROOT
    ow = dict(Config.fromfile(str(ROOT / config)).optim_wrapper, type='OptimWrapper')
    ow.pop('dtype', None)
    wrapper = OPTIM_WRAPPER_CONSTRUCTORS.build(dict(
        type=ow.pop('constructor'), optim_wrapper_cfg=ow,
        paramwise_cfg=ow.pop('paramwise_cfg')))(model)
    return wrapper.optimizer


def _lr_scale_by_name(model: nn.Module, optimizer) -> dict[str, float]:
    """{parameter name: its group's lr / the optimizer's base lr}."""
    group_of = {id(p): g for g in optimizer.param_groups for p in g['params']}
    return {name: group_of[id(p)]['lr'] / optimizer.defaults['lr']
            for name, p in model.named_parameters() if p.requires_grad}


def test_lr_scales_follow_mmpretrain_layer_decay_constructor():
    """Every parameter's fine-tuning lr scale, from our constructor and the shipped
    fine-tuning config, against mmpretrain's LearningRateDecayOptimWrapperConstructor and its
    BEiT fine-tuning recipe (layer decay 0.65 in both), each reading PeCoViT's depths: the
    same rate ** (L + 1 - depth) for the patch embedding, each block, and the head."""
    import torch
    torch.manual_seed(0)
    model = _Algorithm(PeCoViT(arch='test', img_size=32, patch_size=8, qkv_bias='qv',
                               use_abs_pos_emb=False, rel_pos_bias='per_block',
                               layer_scale_init_value=0.1, out_type='avg_featmap',
                               final_norm=False), nn.Linear(64, 10))
    want = _lr_scale_by_name(model, _mmpretrain_optimizer(
        'beit/benchmarks/beit-base-p16_8xb128-coslr-100e_in1k.py', model))
    got = _lr_scale_by_name(model, _shipped_optimizer('configs/peco/finetune_vitb_in1k.py',
                                                      model))
    assert set(got) == set(want)
    assert len({round(v, 6) for v in want.values()}) == 4  # depths 0, 1, 2 and the head
    assert got == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize('recipe', [
    ('beit/beit_beit-base-p16_8xb256-amp-coslr-300e_in1k.py',
     'configs/peco/pretrain_vitb_in1k_300e.py'),
    ('beit/benchmarks/beit-base-p16_8xb128-coslr-100e_in1k.py',
     'configs/peco/finetune_vitb_in1k.py'),
], ids=['pretraining', 'fine-tuning'])
def test_weight_decay_follows_mmpretrain_beit(recipe):
    """Which parameters BEiT decays, from mmpretrain's own BEiT configs and constructor on its
    BEiT ViT, against the shipped PeCo configs on PeCoViT: the [MASK] token and the
    relative-position tables are decayed, tokens, norms, biases and layer scales are not."""
    from mmpretrain.models import BEiTPretrainViT
    want = _mmpretrain_decay(recipe[0], _Algorithm(BEiTPretrainViT(
        arch=dict(embed_dims=64, num_layers=2, num_heads=4, feedforward_channels=256),
        img_size=32, patch_size=8, use_shared_rel_pos_bias=True)))
    assert want['mask_token'] and want['relative_position_bias_table']  # the reference's rule
    got = _shipped_decay(recipe[1], _Algorithm(PeCoViT(
        arch='test', img_size=32, patch_size=8, qkv_bias='qv', use_abs_pos_emb=False,
        rel_pos_bias='shared', layer_scale_init_value=0.1, use_mask_token=True)))
    assert got == want


def test_peco_mae_weight_decay_follows_mmpretrain_mae():
    """PeCo_MAE's pretraining config on PeCoViT + PeCoMAEDecoder decays what mmpretrain's MAE
    recipe decays on MAEViT + MAEPretrainDecoder: weights only; the cls token, the decoder's
    [MASK] token, norms and biases are not decayed; the sin-cos tables are frozen in both."""
    from mmengine.config import Config
    from mmpretrain.models import MAEPretrainDecoder, MAEViT

    from peco_mm.models.peco_mae import PeCoMAEDecoder
    from tests.conftest import ROOT
    config = 'configs/peco/pretrain_mae_vitb_in1k_800e.py'
    want = _mmpretrain_decay(
        'mae/mae_vit-base-p16_8xb512-amp-coslr-800e_in1k.py',
        _Algorithm(MAEViT(arch=dict(embed_dims=64, num_layers=2, num_heads=4,
                                    feedforward_channels=256), img_size=32, patch_size=8),
                   MAEPretrainDecoder(num_patches=16, patch_size=8, embed_dim=64,
                                      decoder_embed_dim=32, decoder_depth=1,
                                      decoder_num_heads=4)))
    assert not want['mask_token'] and not want['cls_token'] and want['weight']
    bb = {k: v for k, v in Config.fromfile(str(ROOT / config)).model.backbone.items()
          if k != 'type'}
    bb.update(arch='test', img_size=32, patch_size=8)
    decoder = PeCoMAEDecoder(grid=4, in_channels=64, embed_dims=32, num_layers=1, num_heads=4)
    ours = _Algorithm(PeCoViT(**bb), decoder)
    ours.backbone.pos_embed.requires_grad_(False)  # PeCoMAE's fixed sin-cos table
    assert _shipped_decay(config, ours) == want
