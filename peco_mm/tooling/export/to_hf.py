"""PeCoViT weights in transformers' BEiT names (`BeitModel`, `BeitForImageClassification`,
`BeitForMaskedImageModeling`; `HF_BEIT_NAMES` read backwards), with the BEiT config."""
from __future__ import annotations

import json

import torch

from ...checkpoint.keymaps import HF_BEIT_NAMES, hf_qkv_names, rename_by_table
from .card import image_processor, model_card
from .preprocessing import HF_PROCESSOR_NOTE, _hw
from .source import (Export, ExportSource, HF_CLASSES, _head_bias, _identity_norm, _pooling,
                     _split_qkv_bias)


# ---- step 3b: Hugging Face transformers -----------------------------------------------------
def to_hf(src: ExportSource) -> Export:
    """transformers BEiT weights (save_pretrained's names), BeitConfig, image processor."""
    sd, notes = dict(src.state_dict), []
    hf_class = HF_CLASSES[src.kind]
    mean_pooling = hf_mean_pooling(src, sd, notes)
    out = hf_weights(src, sd, '' if hf_class == 'BeitModel' else 'beit.', notes)
    exp = Export('hf', {k: v.contiguous() for k, v in out.items()},
                 hf_beit_config(src, hf_class, mean_pooling),
                 notes=src.notes + notes + [HF_PROCESSOR_NOTE])
    exp.files['preprocessor_config.json'] = json.dumps(image_processor(src), indent=2) + '\n'
    exp.load_call = f'transformers.{hf_class}.from_pretrained({{dst!r}})'
    exp.files['README.md'] = model_card(src, exp)
    return exp


def hf_mean_pooling(src: ExportSource, sd: dict, notes: list[str]) -> bool:
    """transformers BEiT's `use_mean_pooling` for the source's norms and pooling; a source
    without any final norm gets an identity `fc_norm` in `sd` (noted)."""
    has_norm, has_fc_norm = 'norm.weight' in sd, 'fc_norm.weight' in sd
    if src.kind == 'mim':
        if not has_norm:
            raise ValueError('a masked-image-modeling export needs the final norm before the '
                             'code classifier; the source has none')
        return True  # BeitForMaskedImageModeling's own layernorm is the final norm
    if has_fc_norm:
        return True
    if has_norm:
        if src.kind == 'classifier' and _pooling(src)['pool'] == 'avg':
            raise ValueError('the classifier pools the normalised tokens (final_norm=True, '
                             "out_type='avg_featmap'): transformers' BEiT pools before its "
                             'norm; export it with --kind backbone')
        return False
    if src.kind == 'classifier':
        raise ValueError('a classifier without final norm or fc_norm: transformers BEiT '
                         'normalises before its classifier; export with --kind backbone')
    sd.update(_identity_norm('fc_norm', src.kwargs['arch']['embed_dims'], sd))
    notes.append('no final norm in the source (a dense backbone): the pooler gets an '
                 'identity-initialised LayerNorm, used by pooler_output only')
    return True


def hf_weights(src: ExportSource, sd: dict, prefix: str, notes: list[str]) -> dict:
    """PeCoViT's weights (and head) under transformers BEiT's names: qkv split into query /
    key / value, the rest renamed by `HF_BEIT_NAMES`."""
    kw = src.kwargs
    out: dict[str, torch.Tensor] = {}
    for i in range(kw['arch']['num_layers']):
        qkv = sd.pop(f'blocks.{i}.attn.qkv.weight')
        for name, part in zip(hf_qkv_names(i), qkv.chunk(3)):
            out[prefix + name] = part
    notes += _split_qkv_bias(sd, kw['qkv_bias'], kw['arch']['num_layers'])
    if src.kind == 'mim' and 'mask_token' not in sd:
        raise ValueError('a masked-image-modeling export needs the [MASK] token')
    if src.kind != 'mim' and sd.pop('mask_token', None) is not None:
        notes.append('mask_token dropped (used by BeitForMaskedImageModeling only)')
    for key, value in sd.items():
        new = rename_by_table(key, HF_BEIT_NAMES, inverse=True)
        if new is None:
            raise ValueError(f'{key}: no transformers BEiT name for this PeCoViT weight')
        out[('' if src.kind == 'mim' and key.startswith('norm.') else prefix) + new] = value
    head = {'mim': 'lm_head', 'classifier': 'classifier'}.get(src.kind)
    if head:
        out[f'{head}.weight'], out[f'{head}.bias'] = src.head['weight'], _head_bias(src.head)
    return out


def hf_beit_config(src: ExportSource, hf_class: str, mean_pooling: bool) -> dict:
    """The `BeitConfig` fields of the source's architecture, its vocabulary or labels."""
    kw, arch = src.kwargs, src.kwargs['arch']
    img = _hw(kw['img_size'])
    config = dict(
        architectures=[hf_class], model_type='beit',
        hidden_size=arch['embed_dims'], num_hidden_layers=arch['num_layers'],
        num_attention_heads=arch['num_heads'],
        intermediate_size=int(arch['embed_dims'] * arch['mlp_ratio']), hidden_act='gelu',
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        drop_path_rate=float(kw.get('drop_path_rate', 0.1)),
        layer_norm_eps=float(kw.get('norm_eps', 1e-6)),
        image_size=list(img) if img[0] != img[1] else img[0], patch_size=kw['patch_size'],
        num_channels=kw.get('in_channels', 3), use_mask_token=src.kind == 'mim',
        use_absolute_position_embeddings=kw['use_abs_pos_emb'],
        use_relative_position_bias=kw['rel_pos_bias'] == 'per_block',
        use_shared_relative_position_bias=kw['rel_pos_bias'] == 'shared',
        layer_scale_init_value=float(kw['layer_scale_init_value'] or 0.1)
        if 'blocks.0.gamma_1' in src.state_dict else 0.0,  # > 0: lambda_1/2 exist
        use_mean_pooling=mean_pooling)
    if src.kind == 'mim':
        config['vocab_size'] = int(src.head['weight'].shape[0])
    if src.kind == 'classifier':
        n = int(src.head['weight'].shape[0])
        names = src.run.get('classes') or [f'LABEL_{i}' for i in range(n)]
        if len(names) != n:
            names = [f'LABEL_{i}' for i in range(n)]
        config['id2label'] = {str(i): c for i, c in enumerate(names)}
        config['label2id'] = {c: i for i, c in enumerate(names)}
    return config
