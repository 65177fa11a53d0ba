"""The files written next to the weights: config.json, the image processor's settings and the
model card generated from the run."""
from __future__ import annotations

import json
import os
import os.path as osp

from .preprocessing import data_config
from .source import CITATION_BIBTEX, TITLES, Export, ExportSource, _hw, _pooling


# ---- preprocessing ----------------------------------------------------------------------------
def image_processor(src: ExportSource) -> dict:
    """preprocessor_config.json: resize the short side, centre-crop, scale to [0, 1] and
    normalise, as mmpretrain's `ResizeEdge` + `CenterCrop` + data preprocessor do (transformers'
    `BitImageProcessor` is the one that resizes by the short side)."""
    d = data_config(src)
    return dict(image_processor_type='BitImageProcessor', do_resize=True,
                size=dict(shortest_edge=d['resize']), resample=3,  # PIL bicubic
                do_center_crop=True, crop_size=dict(height=d['crop'][0], width=d['crop'][1]),
                do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                image_mean=d['mean01'], image_std=d['std01'], do_convert_rgb=True)


# ---- the model card -------------------------------------------------------------------------
def model_card(src: ExportSource, exp: Export) -> str:
    """README.md for the exported folder, from the run's stored config and state."""
    lines = _card_header(src, exp) + _card_model(src) + _card_source_run(src) + \
        _card_metrics(src.run)
    if exp.notes:
        lines += ['', '## Export notes', ''] + [f'- {n}' for n in exp.notes]
    lines += ['', '## Citation', '', '```bibtex', CITATION_BIBTEX, '```', '']
    return '\n'.join(lines)


def _card_header(src: ExportSource, exp: Export) -> list[str]:
    """The card's metadata block, title, and how to load the folder."""
    library = 'timm' if exp.target == 'timm' else 'transformers'
    task = dict(classifier='image-classification', mim='masked-image-modeling',
                backbone='image-feature-extraction')[src.kind]
    return ['---', f'library_name: {library}', 'license: apache-2.0', 'tags:',
            '- peco', '- beit', '- vision-transformer', f'- {task}', f'pipeline_tag: {task}',
            '---', '',
            f'# PeCo ViT ({TITLES[src.kind]})',
            '',
            'A Vision Transformer trained with peco_mm, an implementation of '
            '[PeCo: Perceptual Codebook for BERT Pre-training of Vision Transformers]'
            f'(https://arxiv.org/abs/2111.12710) (AAAI 2023), exported to {library}.', '',
            '## Load it', '', '```python',
            f'import {library}',
            exp.load_call.format(dst='PATH_TO_THIS_FOLDER'), '```']


def _card_model(src: ExportSource) -> list[str]:
    """Architecture, head and input normalisation."""
    kw = src.kwargs
    arch = kw['arch']
    lines = ['', '## Model', '',
             f'- architecture: {arch["num_layers"]} blocks, width {arch["embed_dims"]}, '
             f'{arch["num_heads"]} heads, MLP ratio {arch["mlp_ratio"]}, patch '
             f'{kw["patch_size"]}, input {"x".join(map(str, _hw(kw["img_size"])))} px',
             f'- positions: {"absolute" if kw["use_abs_pos_emb"] else "no absolute"}; '
             f'relative-position bias {kw["rel_pos_bias"]}; q/k/v bias {kw["qkv_bias"]}; '
             f'layer scale {"yes" if "blocks.0.gamma_1" in src.state_dict else "no"}']
    if src.kind == 'classifier':
        lines.append(f'- classifier: {src.head["weight"].shape[0]} classes on the '
                     f'{"mean-pooled" if _pooling(src)["pool"] == "avg" else "class"} token')
    if src.kind == 'mim':
        lines.append(f'- masked-image-modeling head: {src.head["weight"].shape[0]} codewords of '
                     'the PeCo tokenizer')
    d = data_config(src)
    lines.append(f'- input normalisation: RGB in [0, 1], mean {d["mean01"]}, std {d["std01"]}; '
                 f'test resize (short side) {d["resize"]}, centre crop '
                 f'{"x".join(map(str, d["crop"]))}')
    return lines


def _card_source_run(src: ExportSource) -> list[str]:
    """The checkpoint, experiment, model type, schedule, tokenizer, init and classes."""
    run = src.run
    cfg = run.get('cfg') or {}
    model = cfg.get('model') if isinstance(cfg.get('model'), dict) else {}
    lines = ['', '## Source run', '']
    if run.get('source'):
        lines.append(f'- checkpoint: `{osp.basename(run["source"])}`')
    if run.get('experiment'):
        lines.append(f'- experiment: `{run["experiment"]}`')
    if model.get('type'):
        backbone = (model.get('backbone') or {}).get('type', '?')
        lines.append(f'- model type: `{model["type"]}` (backbone `{backbone}`)')
    unit = 'epoch' if run.get('max_epochs') else 'iter'
    if run.get(unit) or run.get(f'max_{unit}s'):
        lines.append(f'- training: {unit} {run.get(unit, "?")} of {run.get(f"max_{unit}s", "?")}'
                     + (' (pretraining)' if src.kind == 'mim' else ''))
    tokenizer = _tokenizer_line(cfg, model, src)
    if tokenizer:
        lines.append(f'- tokenizer: {tokenizer}')
    init = ((model.get('backbone') or {}).get('init_cfg') or {})
    if isinstance(init, dict) and init.get('checkpoint'):
        lines.append(f'- initialised from: `{init["checkpoint"]}`')
    if run.get('classes') and src.kind == 'classifier':
        shown = ', '.join(run['classes'][:10]) + (' ...' if len(run['classes']) > 10 else '')
        lines.append(f'- classes: {shown}')
    return lines


def _card_metrics(run: dict) -> list[str]:
    lines = ['', '## Metrics', '']
    if run.get('metrics'):
        lines += ['| metric | value |', '|---|---|']
        lines += [f'| {k} | {v:.4g} |' for k, v in sorted(run['metrics'].items())]
    else:
        lines.append('The run recorded no evaluation metrics next to this checkpoint.')
    return lines


def _tokenizer_line(cfg: dict, model: dict, src: ExportSource) -> str:
    target = model.get('target_generator') if isinstance(model.get('target_generator'), dict) \
        else {}
    parts = []
    if target.get('type'):
        parts.append(f'`{target["type"]}`')
    path = target.get('checkpoint') or cfg.get('tokenizer_checkpoint')
    if path:
        parts.append(f'checkpoint `{path}`')
    if src.kind == 'mim':
        parts.append(f'K = {src.head["weight"].shape[0]} codewords')
    return ', '.join(parts)


# ---- writing --------------------------------------------------------------------------------
def write_export(exp: Export, dst: str) -> list[str]:
    """Write the folder: model.safetensors, config.json, and the other files. Returns paths."""
    from safetensors.torch import save_file
    os.makedirs(dst, exist_ok=True)
    paths = [osp.join(dst, 'model.safetensors'), osp.join(dst, 'config.json')]
    save_file(exp.state_dict, paths[0], metadata={'format': 'pt'})
    if exp.target == 'hf':
        hf_config(exp).save_pretrained(dst)  # BeitConfig writes config.json
    else:
        with open(paths[1], 'w') as f:
            json.dump(exp.config, f, indent=2)
            f.write('\n')
    for name, text in exp.files.items():
        paths.append(osp.join(dst, name))
        with open(paths[-1], 'w') as f:
            f.write(text)
    return paths


def hf_config(exp: Export):
    """The transformers `BeitConfig` of an export (transformers imported here, on use)."""
    try:
        from transformers import BeitConfig
    except ImportError:
        raise ImportError('--to hf needs Hugging Face transformers: pip install '
                          "'transformers>=4.45,<4.52' (the versions mmpretrain 1.2 imports "
                          'with)') from None
    return BeitConfig(**{k: v for k, v in exp.config.items() if k != 'model_type'})
