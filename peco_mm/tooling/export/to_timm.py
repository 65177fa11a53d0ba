"""PeCoViT weights in timm's names: `Beit` (relative positions, q/v biases, layer scale) or
`VisionTransformer` (absolute positions, full qkv bias), with the hub config."""
from __future__ import annotations

import os.path as osp
import re

import torch

from .card import model_card
from .preprocessing import _hw, data_config, timm_crop_pct
from .source import (Export, ExportSource, _expand_shared_table, _head_bias, _identity_norm,
                     _pooling, _split_qkv_bias)


# ---- step 3a: timm --------------------------------------------------------------------------
def to_timm(src: ExportSource, per_block_rel_pos: bool = False) -> Export:
    """timm `Beit` (or `VisionTransformer`) weights, config.json and loading call."""
    sd, rel, use_vit, notes = _timm_state_dict(src, per_block_rel_pos)
    kw, arch = src.kwargs, src.kwargs['arch']
    if not use_vit and kw['qkv_bias'] == 'qkv':
        notes += _split_qkv_bias(sd, kw['qkv_bias'], arch['num_layers'])
    args = _timm_model_args(src, sd, rel, use_vit, notes)
    if src.kind == 'classifier':
        sd['head.weight'], sd['head.bias'] = src.head['weight'], _head_bias(src.head)
    eps = kw.get('norm_eps', 1e-6)
    if eps != 1e-6:
        raise ValueError(f'norm_eps={eps}: timm builds its LayerNorms with eps 1e-6')
    name = 'vit_base_patch16_224' if use_vit else 'beit_base_patch16_224'
    data = data_config(src)
    pretrained_cfg = dict(
        input_size=[3, *data['crop']], interpolation=data['interpolation'],
        crop_pct=data['crop_pct'], crop_mode='center', mean=data['mean01'], std=data['std01'],
        num_classes=args['num_classes'], first_conv='patch_embed.proj', classifier='head',
        fixed_input_size=True, license='apache-2.0')
    if src.run.get('classes') and src.kind == 'classifier':
        pretrained_cfg['label_names'] = src.run['classes']
    config = dict(architecture=name, num_classes=args['num_classes'],
                  num_features=arch['embed_dims'], global_pool=args['global_pool'],
                  model_args=args, pretrained_cfg=pretrained_cfg)
    if timm_crop_pct(data['crop'], data['resize']) is None:
        notes.append(f'timm cannot resize the short side to {data["resize"]} before a '
                     f'{"x".join(map(str, data["crop"]))} crop (its eval transform scales each '
                     'side by one crop_pct, then ResizeKeepRatio rounds): its pixels differ '
                     "from the run's test pipeline")
    exp = Export('timm', {k: v.contiguous() for k, v in sd.items()}, config,
                 notes=src.notes + notes)
    exp.load_call = "timm.create_model('local-dir:{dst}', pretrained=True)"
    exp.files['README.md'] = model_card(src, exp)
    return exp


def _timm_state_dict(src: ExportSource, per_block_rel_pos: bool
                     ) -> tuple[dict[str, torch.Tensor], str, bool, list[str]]:
    """The backbone's weights in timm's names (Beit's, or VisionTransformer's when there is
    no relative position and no q/v-only bias: `use_vit`), the relative-position scheme they
    use, `use_vit` and the notes on what changed."""
    kw, sd, notes = src.kwargs, dict(src.state_dict), []
    rel = kw['rel_pos_bias']
    if rel == 'shared' and per_block_rel_pos:
        sd, rel = _expand_shared_table(sd, kw['arch']['num_layers']), 'per_block'
        notes.append('the shared relative-position table was copied into every block')
    use_vit = rel == 'none' and kw['qkv_bias'] != 'qv'
    if sd.pop('mask_token', None) is not None:
        notes.append('mask_token dropped: timm has no [MASK] token')
    if src.kind == 'mim':
        notes.append('the masked-image-modeling head has no place in timm; it is not exported '
                     '(--to hf writes BeitForMaskedImageModeling)')
    out: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        if use_vit:
            key = re.sub(r'^blocks\.(\d+)\.gamma_([12])$', r'blocks.\1.ls\2.gamma', key)
        else:
            key = re.sub(r'^blocks\.(\d+)\.rel_pos_bias\.', r'blocks.\1.attn.', key)
        out[key] = value
    return out, rel, use_vit, notes


def _timm_model_args(src: ExportSource, sd: dict, rel: str, use_vit: bool,
                     notes: list[str]) -> dict:
    """`timm.create_model` keyword arguments for the exported weights (an identity fc_norm
    joins `sd` when a Beit source has no final norm)."""
    kw, arch, pooled = src.kwargs, src.kwargs['arch'], _pooling(src)
    img = _hw(kw['img_size'])
    args = dict(img_size=list(img) if img[0] != img[1] else img[0],
                patch_size=kw['patch_size'], in_chans=kw.get('in_channels', 3),
                embed_dim=arch['embed_dims'], depth=arch['num_layers'],
                num_heads=arch['num_heads'], mlp_ratio=arch['mlp_ratio'],
                num_classes=int(src.head['weight'].shape[0]) if src.kind == 'classifier' else 0)
    if use_vit:
        args.update(qkv_bias=kw['qkv_bias'] == 'qkv', global_pool=pooled['pool'],
                    fc_norm=pooled['fc_norm'], final_norm=pooled['any_norm'],
                    pos_embed='learn' if kw['use_abs_pos_emb'] else 'none')
    else:
        if not pooled['any_norm']:
            sd.update(_identity_norm('fc_norm', arch['embed_dims'], sd))
            notes.append('no final norm in the source (a dense backbone): timm Beit gets an '
                         'identity-initialised fc_norm, used by its pooled output only')
        args.update(qkv_bias=kw['qkv_bias'] != 'none', use_abs_pos_emb=kw['use_abs_pos_emb'],
                    use_rel_pos_bias=rel == 'per_block', use_shared_rel_pos_bias=rel == 'shared',
                    global_pool=pooled['pool'], use_fc_norm=pooled['fc_norm'] or
                    not pooled['any_norm'])
    # always stated: timm's beit_* presets default to layer scale 0.1 (the weights replace
    # the value); without layer scale it is 0.0, not None, which timm.create_model drops
    args['init_values'] = (kw['layer_scale_init_value'] or 0.1) \
        if 'blocks.0.gamma_1' in src.state_dict else 0.0
    return args


def timm_file_call(exp: Export, dst: str) -> str:
    """The `timm.create_model` call that loads the exported safetensors file by itself."""
    args = ', '.join(f'{k}={v!r}' for k, v in exp.config['model_args'].items())
    weights = osp.join(dst, 'model.safetensors')
    return (f"timm.create_model({exp.config['architecture']!r}, pretrained=True, "
            f"pretrained_cfg_overlay=dict(file={weights!r}, "
            f"num_classes={exp.config['num_classes']}), {args})")
