"""The files written next to the weights: config.json, the image processor's settings and the
model card generated from the run."""
from __future__ import annotations

import html
import json
import os
import os.path as osp

from .preprocessing import HF_PROCESSOR, _hw, data_config
from .source import CITATION_BIBTEX, TITLES, Export, ExportSource, _pooling


# ---- preprocessing ----------------------------------------------------------------------------
def image_processor(src: ExportSource) -> dict:
    """preprocessor_config.json: resize the short side, centre-crop, scale to [0, 1] and
    normalise, as mmpretrain's `ResizeEdge` + `CenterCrop` + data preprocessor do (`HF_PROCESSOR`
    of preprocessing.py: why that class)."""
    d = data_config(src)
    return dict(image_processor_type=HF_PROCESSOR, do_resize=True,
                size=dict(shortest_edge=d['resize']), resample=d['resample'],
                do_center_crop=True, crop_size=dict(height=d['crop'][0], width=d['crop'][1]),
                do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                image_mean=d['mean01'], image_std=d['std01'], do_convert_rgb=True)


# ---- the model card -------------------------------------------------------------------------
def model_card(src: ExportSource, exp: Export) -> str:
    """README.md for the exported folder, from the run's stored config and state."""
    lines = _card_header(src, exp) + _card_model(src) + _card_source_run(src) + \
        _card_metrics(src.run)
    if exp.notes:
        lines += ['', '## Export notes', ''] + [f'- {_text(n)}' for n in exp.notes]
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
                 f'{"x".join(map(str, d["crop"]))}; PIL {d["interpolation"]} resampling')
    return lines


def _card_source_run(src: ExportSource) -> list[str]:
    """The checkpoint, experiment, model type, schedule, tokenizer, init and classes."""
    run = src.run
    cfg = run.get('cfg') or {}
    model = _dict(cfg.get('model'))
    lines = ['', '## Source run', '']
    if run.get('source'):
        lines.append(f'- checkpoint: {_code(osp.basename(run["source"]))}')
    if run.get('experiment'):
        lines.append(f'- experiment: {_code(run["experiment"])}')
    if model.get('type'):
        backbone = _dict(model.get('backbone')).get('type', '?')
        lines.append(f'- model type: {_code(model["type"])} (backbone {_code(backbone)})')
    unit = 'epoch' if run.get('max_epochs') else 'iter'
    if run.get(unit) or run.get(f'max_{unit}s'):
        lines.append(f'- training: {unit} {run.get(unit, "?")} of {run.get(f"max_{unit}s", "?")}'
                     + (' (pretraining)' if src.kind == 'mim' else ''))
    tokenizer = _tokenizer_line(cfg, model, src)
    if tokenizer:
        lines.append(f'- tokenizer: {tokenizer}')
    init = _dict(_dict(model.get('backbone')).get('init_cfg'))
    if init.get('checkpoint'):
        lines.append(f'- initialised from: {_code(init["checkpoint"])}')
    if run.get('classes') and src.kind == 'classifier':
        shown = ', '.join(map(_text, run['classes'][:10])) + \
            (' ...' if len(run['classes']) > 10 else '')
        lines.append(f'- classes: {shown}')
    return lines


def _card_metrics(run: dict) -> list[str]:
    lines = ['', '## Metrics', '']
    if run.get('metrics'):
        lines += ['| metric | value |', '|---|---|']
        lines += [f'| {_text(k, cell=True)} | {v:.4g} |'
                  for k, v in sorted(run['metrics'].items())]
    else:
        lines.append('The run recorded no evaluation metrics next to this checkpoint.')
    return lines


def _tokenizer_line(cfg: dict, model: dict, src: ExportSource) -> str:
    target = _dict(model.get('target_generator'))
    parts = []
    if target.get('type'):
        parts.append(_code(target['type']))
    path = target.get('checkpoint') or cfg.get('tokenizer_checkpoint')
    if path:
        parts.append(f'checkpoint {_code(path)}')
    if src.kind == 'mim':
        parts.append(f'K = {src.head["weight"].shape[0]} codewords')
    return ', '.join(parts)


# ---- what the run says, as card text -------------------------------------------------------
def _text(value, cell: bool = False) -> str:
    """A value from the run as Markdown text: on one line, HTML escaped (a class name or
    metric key is shown, never rendered as markup), `|` escaped in a table cell."""
    text = html.escape(' '.join(_leaf(value).split()), quote=False)
    return text.replace('|', '\\|') if cell else text


def _code(value) -> str:
    """A value from the run as a code span (shown literally): on one line, without the
    backticks that would end the span."""
    return '`' + ' '.join(_leaf(value).replace('`', "'").split()) + '`'


MAX_SHOWN = 500  # characters of one value from the run on the card


def _leaf(value) -> str:
    """The text of a plain leaf (a string, number, True / False / None), at most `MAX_SHOWN`
    characters; anything else is shown as its type's name, never as `str()` of it."""
    if type(value) in (str, int, float, bool, type(None)):
        text = str(value)
        return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + '...'
    return f'<{type(value).__name__}>'


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


# ---- writing --------------------------------------------------------------------------------
def write_export(exp: Export, dst: str, overwrite_readme: bool = False) -> list[str]:
    """Write the folder: model.safetensors, config.json, and the other files. Returns paths.

    A README.md already in `dst` that differs from the card written now (a model card edited
    by hand) is kept: the export is refused before anything is written, unless
    `overwrite_readme`."""
    from safetensors.torch import save_file
    if osp.exists(dst) and not osp.isdir(dst):
        raise ValueError(f'{dst} exists and is not a folder; the export writes a folder '
                         '(model.safetensors, config.json, README.md, ...): give a new or an '
                         'existing folder')
    readme = osp.join(dst, 'README.md')
    if 'README.md' in exp.files and osp.isfile(readme) and not overwrite_readme:
        with open(readme, encoding='utf-8', errors='replace') as f:
            if f.read() != exp.files['README.md']:
                raise ValueError(f'{readme} exists and is not the model card this export '
                                 'writes (edited by hand?); nothing was written: pass '
                                 '--overwrite-readme to replace it, or export into another '
                                 'folder')
    try:
        os.makedirs(dst, exist_ok=True)
    except OSError as err:  # a file on the way, no permission
        raise ValueError(f'{dst}: cannot create the export folder ({err.strerror or err})'
                         ) from None
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
