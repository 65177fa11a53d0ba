"""Export PeCoViT weights to timm and Hugging Face transformers: the inverse of `convert`.

A PeCo pretraining run, a fine-tuned classifier (mmpretrain `ImageClassifier`) or a dense run's
backbone (mmseg / mmdet, `backbone.*`) is read through the one conversion path
(`peco_mm.checkpoint.convert_checkpoint`), then written in the naming of

- timm's `Beit` (q/v biases, layer scale `gamma_1/2`, shared `rel_pos_bias.*` or per-block
  `blocks.{i}.attn.relative_position_bias_table`, `fc_norm` after mean pooling, `head`), or
  timm's `VisionTransformer` for a ViT without relative positions and with a full qkv bias
  (MAE / PeCo_MAE style: `attn.qkv.bias`, `ls1/ls2.gamma`);
- transformers' BEiT (`BeitModel`, `BeitForImageClassification`,
  `BeitForMaskedImageModeling`; `HF_BEIT_NAMES` in `convert`, read backwards).

Each export is a folder: `model.safetensors`, `config.json` (timm's hub layout, loaded by
`timm.create_model('local-dir:DST', pretrained=True)`; or a transformers `BeitConfig`), a model
card `README.md` generated from the run, and for transformers `preprocessor_config.json`
normalising as the run did. Nothing read from a checkpoint is executed: the config text that
mmengine stores in `meta.cfg` is read as literals only (`read_config_text`).

What cannot be carried is said, not hidden: the masked-image-modeling head has no place in
timm; a key bias of a full qkv bias is dropped for BEiT targets (it adds the same value to
every logit of a query's softmax, so the outputs are unchanged); a backbone without any final
norm gets an identity-initialised pooling norm where the target class needs one.
"""
from __future__ import annotations

import glob
import json
import os
import os.path as osp
import re
from dataclasses import dataclass, field

import torch

from ..checkpoint import convert_checkpoint, parse_config_text, strip_prefix, unwrap
from ..checkpoint.keymaps import HF_BEIT_NAMES, hf_qkv_names, rename_by_table

TARGETS = ('timm', 'hf')
KINDS = ('classifier', 'mim', 'backbone')
# what PeCo's ViT sees unless the run says otherwise (configs/_base_/models/peco_vit_b.py)
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)
TITLES = dict(classifier='fine-tuned classifier', mim='MIM pretraining', backbone='backbone')
HF_CLASSES = dict(classifier='BeitForImageClassification', mim='BeitForMaskedImageModeling',
                  backbone='BeitModel')
# the paper, as CITATION.cff's preferred-citation states it (a test keeps the two equal)
CITATION_BIBTEX = """@inproceedings{dong2023peco,
  title = {PeCo: Perceptual Codebook for BERT Pre-training of Vision Transformers},
  author = {Dong, Xiaoyi and Bao, Jianmin and Zhang, Ting and Chen, Dongdong and Zhang, Weiming
            and Yuan, Lu and Chen, Dong and Wen, Fang and Yu, Nenghai and Guo, Baining},
  booktitle = {Proceedings of the AAAI Conference on Artificial Intelligence},
  year = {2023},
  note = {arXiv:2111.12710}
}"""


@dataclass
class ExportSource:
    """A checkpoint's backbone (PeCoViT names and arguments), its head, and what the run says."""
    state_dict: dict[str, torch.Tensor]
    kwargs: dict
    kind: str  # 'classifier' | 'mim' | 'backbone'
    head: dict[str, torch.Tensor] = field(default_factory=dict)  # 'weight' (K, C), 'bias' (K,)
    run: dict = field(default_factory=dict)  # see `read_run`
    notes: list[str] = field(default_factory=list)


@dataclass
class Export:
    """What one target gets: tensors in its names, its config files, the loading call."""
    target: str
    state_dict: dict[str, torch.Tensor]
    config: dict  # config.json
    files: dict[str, str] = field(default_factory=dict)  # other files: name -> text
    load_call: str = ''  # Python that loads the folder on the other side ({dst} placeholder)
    notes: list[str] = field(default_factory=list)


# ---- step 1: read the run -------------------------------------------------------------------
def read_config_text(text: str, source: str = 'the stored config') -> dict:
    """The variables of a stored config text (mmengine's `pretty_text`) as plain data, read by
    the one stored-config reader (`stored_config.parse_config_text`): nothing is executed,
    and text that is not plain data is refused with the line and construct named."""
    return parse_config_text(text, source)


def read_run(ckpt: dict, path: str | None = None) -> dict:
    """What a checkpoint (and the run folder around it) says about the run: the stored config
    as literals ('cfg'), epoch / iter, the schedule's length, class names and the last
    evaluation metrics (from mmengine's message hub, else the run's vis_data/scalars.json)."""
    meta = ckpt.get('meta') if isinstance(ckpt.get('meta'), dict) else {}
    text = meta.get('cfg')
    cfg = read_config_text(text, f'{path} meta.cfg') if isinstance(text, str) else {}
    train_cfg = cfg.get('train_cfg') if isinstance(cfg.get('train_cfg'), dict) else {}
    run = dict(cfg=cfg, epoch=meta.get('epoch'), iter=meta.get('iter'),
               max_epochs=train_cfg.get('max_epochs'), max_iters=train_cfg.get('max_iters'),
               experiment=meta.get('experiment_name'), source=path)
    classes = (meta.get('dataset_meta') or {}).get('classes')
    run['classes'] = [str(c) for c in classes] if isinstance(classes, (list, tuple)) else None
    run['metrics'] = _hub_metrics(ckpt.get('message_hub')) or \
        (_scalar_metrics(osp.dirname(osp.abspath(path))) if path else {})
    return run


_TRAIN_KEYS = re.compile(r'^(train/|.*(loss|lr|time|memory|grad_norm))|^(epoch|iter|step)$')


def _hub_metrics(hub) -> dict:
    """Last values of the val/ and test/ scalars mmengine's message hub kept."""
    scalars = (hub or {}).get('log_scalars') if isinstance(hub, dict) else None
    out = {}
    for key, buf in (scalars or {}).items():
        if key.startswith(('val/', 'test/')) and not _TRAIN_KEYS.match(key.split('/', 1)[1]):
            data = getattr(buf, 'data', None)
            if data is not None and len(data[0]):
                out[key.split('/', 1)[1]] = float(data[0][-1])
    return out


def _scalar_metrics(run_dir: str) -> dict:
    """The last evaluation record of the newest <run_dir>/*/vis_data/scalars.json."""
    files = sorted(glob.glob(osp.join(run_dir, '*', 'vis_data', 'scalars.json')))
    if not files:
        return {}
    out = {}
    with open(files[-1]) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            metrics = {k: float(v) for k, v in rec.items()
                       if not _TRAIN_KEYS.match(k) and isinstance(v, (int, float))}
            if metrics:
                out = metrics
    return out


# ---- step 2: the backbone, its head, and what kind of model it is ----------------------------
def read_export_source(ckpt: dict, path: str | None = None, kind: str | None = None,
                       num_heads: int | None = None) -> ExportSource:
    """Backbone (through `convert_checkpoint`), head and run information of a checkpoint.

    kind: 'classifier' (a `head.fc` classifying the backbone's pooled output), 'mim' (PeCo's
    code classifier on every token), 'backbone'; default from the stored config's model type,
    else from the weights (a frozen tokenizer next to `head.fc` means pretraining).
    num_heads: for weights without a relative-position table, which do not record it;
    default from the stored config.
    """
    if kind is not None and kind not in KINDS:
        raise ValueError(f'kind={kind!r}; allowed: {KINDS}')
    conv = convert_checkpoint(ckpt)
    if conv.unrecognised:
        raise ValueError(f'{path or "checkpoint"} ({conv.fmt}): cannot map these keys to '
                         f'PeCoViT: {conv.unrecognised}')
    run = read_run(ckpt, path)
    sd = strip_prefix(unwrap(ckpt)[0], 'module.') if _wrapped(ckpt) else {}
    head = {n: sd[f'head.fc.{n}'] for n in ('weight', 'bias') if f'head.fc.{n}' in sd}
    model_cfg = run['cfg'].get('model') if isinstance(run['cfg'].get('model'), dict) else {}
    detected = _detect_kind(model_cfg.get('type'), sd, head, conv.kwargs)
    kind = kind or detected
    notes = list(conv.notes)
    if kind != 'backbone' and kind != detected:
        raise ValueError(f'{path or "checkpoint"} holds a {detected}, not a {kind}')
    if kind == 'classifier':
        head = _fold_neck(head, sd, model_cfg, notes)
    elif kind == 'backbone':
        head = {}
    backbone_cfg = model_cfg.get('backbone') if isinstance(model_cfg.get('backbone'), dict) \
        else {}
    kwargs = dict(conv.kwargs, arch=dict(conv.kwargs['arch']))
    for key in ('norm_eps', 'drop_path_rate', 'out_type'):
        if key in backbone_cfg and key not in kwargs:
            kwargs[key] = backbone_cfg[key]
    heads = num_heads or _config_heads(backbone_cfg, kwargs['arch']['embed_dims'])
    if heads and not any(k.endswith('relative_position_bias_table') for k in conv.state_dict):
        kwargs['arch']['num_heads'] = int(heads)  # the weights do not record it
        notes = [n for n in notes if not n.startswith('num_heads=')]
    return ExportSource(state_dict=conv.state_dict, kwargs=kwargs, kind=kind, head=head,
                        run=run, notes=notes)


def _config_heads(backbone_cfg: dict, width: int) -> int | None:
    """The backbone's number of heads in a stored PeCoViT config (an override, an arch dict,
    or a preset name of the same width)."""
    from .vit import ARCH_ZOO
    arch = backbone_cfg.get('arch')
    arch = ARCH_ZOO.get(arch) if isinstance(arch, str) else arch
    if backbone_cfg.get('num_heads'):
        return backbone_cfg['num_heads']
    if isinstance(arch, dict) and arch.get('num_heads') and \
            backbone_cfg.get('embed_dims', arch.get('embed_dims')) == width:
        return arch['num_heads']
    return None


def _wrapped(ckpt: dict) -> bool:
    try:
        unwrap(ckpt)
        return True
    except ValueError:
        return False


def _detect_kind(model_type, sd: dict, head: dict, kwargs: dict) -> str:
    width = kwargs['arch']['embed_dims']
    if 'weight' not in head or head['weight'].shape[-1] != width:
        return 'backbone'  # no head, or one on another width (PeCo_MAE's decoder)
    if model_type in ('PeCo', 'BEiT') or any(k.startswith('target_generator.') for k in sd):
        return 'mim'
    if model_type in (None, 'ImageClassifier'):
        return 'classifier'
    return 'backbone'


def _fold_neck(head: dict, sd: dict, model_cfg: dict, notes: list[str]) -> dict:
    """A BatchNorm neck before the classifier (mmpretrain's linear probe, `ClsBatchNormNeck`)
    folded into it: W (x - m) / sqrt(v + eps) * g + W b + c is affine in x, exactly."""
    neck_keys = [k for k in sd if k.startswith('neck.')]
    if not neck_keys:
        return head
    if not {'neck.bn.running_mean', 'neck.bn.running_var'} <= set(sd) or any(
            not k.startswith('neck.bn.') for k in neck_keys):
        raise ValueError(f'the classifier has a neck this export cannot fold into its head '
                         f'({neck_keys[:4]}); export the backbone alone (--kind backbone)')
    neck_cfg = model_cfg.get('neck') if isinstance(model_cfg.get('neck'), dict) else {}
    eps = float(neck_cfg.get('eps', 1e-6))  # ClsBatchNormNeck's default
    scale = (sd['neck.bn.running_var'].double() + eps).rsqrt()  # (C,)
    if 'neck.bn.weight' in sd:
        scale = scale * sd['neck.bn.weight'].double()
    shift = -sd['neck.bn.running_mean'].double() * scale
    if 'neck.bn.bias' in sd:
        shift = shift + sd['neck.bn.bias'].double()
    w = head['weight'].double()
    bias = head.get('bias', torch.zeros(w.shape[0])).double() + w @ shift
    notes.append(f'the BatchNorm neck (eps {eps}) was folded into the classifier')
    dtype = head['weight'].dtype
    return dict(weight=(w * scale).to(dtype), bias=bias.to(dtype))


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
    data, img = data_config(src), _hw(kw['img_size'])
    pretrained_cfg = dict(
        input_size=[3, *img], interpolation='bicubic', crop_pct=data['crop_pct'],
        crop_mode='center', mean=data['mean01'], std=data['std01'], num_classes=args['num_classes'],
        first_conv='patch_embed.proj', classifier='head', fixed_input_size=True,
        license='apache-2.0')
    if src.run.get('classes') and src.kind == 'classifier':
        pretrained_cfg['label_names'] = src.run['classes']
    config = dict(architecture=name, num_classes=args['num_classes'],
                  num_features=arch['embed_dims'], global_pool=args['global_pool'],
                  model_args=args, pretrained_cfg=pretrained_cfg)
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
    if 'blocks.0.gamma_1' in src.state_dict:
        args['init_values'] = kw['layer_scale_init_value'] or 0.1  # the weights replace it
    return args


def timm_file_call(exp: Export, dst: str) -> str:
    """The `timm.create_model` call that loads the exported safetensors file by itself."""
    args = ', '.join(f'{k}={v!r}' for k, v in exp.config['model_args'].items())
    weights = osp.join(dst, 'model.safetensors')
    return (f"timm.create_model({exp.config['architecture']!r}, pretrained=True, "
            f"pretrained_cfg_overlay=dict(file={weights!r}, "
            f"num_classes={exp.config['num_classes']}), {args})")


# ---- step 3b: Hugging Face transformers -----------------------------------------------------
def to_hf(src: ExportSource) -> Export:
    """transformers BEiT weights (save_pretrained's names), BeitConfig, image processor."""
    sd, notes = dict(src.state_dict), []
    hf_class = HF_CLASSES[src.kind]
    mean_pooling = hf_mean_pooling(src, sd, notes)
    out = hf_weights(src, sd, '' if hf_class == 'BeitModel' else 'beit.', notes)
    exp = Export('hf', {k: v.contiguous() for k, v in out.items()},
                 hf_beit_config(src, hf_class, mean_pooling), notes=src.notes + notes)
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


def hf_config(exp: Export):
    """The transformers `BeitConfig` of an export (transformers imported here, on use)."""
    try:
        from transformers import BeitConfig
    except ImportError:
        raise ImportError('--to hf needs Hugging Face transformers: pip install '
                          "'transformers>=4.45,<4.52' (the versions mmpretrain 1.2 imports "
                          'with)') from None
    return BeitConfig(**{k: v for k, v in exp.config.items() if k != 'model_type'})


# ---- preprocessing ----------------------------------------------------------------------------
def data_config(src: ExportSource) -> dict:
    """Normalisation and test-time resize of the run (its data preprocessor and test pipeline),
    falling back to PeCo's ImageNet statistics and a resize to the model's input size."""
    cfg = src.run.get('cfg') or {}
    model = cfg.get('model') if isinstance(cfg.get('model'), dict) else {}
    pre = cfg.get('data_preprocessor') or model.get('data_preprocessor') or {}
    mean, std = pre.get('mean', IMAGENET_MEAN), pre.get('std', IMAGENET_STD)
    if not pre.get('to_rgb', True) and 'mean' in pre:
        mean, std = list(mean)[::-1], list(std)[::-1]  # BGR statistics on BGR input
    img = _hw(src.kwargs['img_size'])
    resize, crop = min(img), img
    for t in cfg.get('test_pipeline') or []:
        if isinstance(t, dict) and t.get('type') == 'ResizeEdge' and t.get('edge') == 'short':
            resize = int(t['scale'])
        if isinstance(t, dict) and t.get('type') == 'CenterCrop':
            crop = _hw(t['crop_size'])
    return dict(mean01=[round(float(m) / 255, 6) for m in mean],
                std01=[round(float(s) / 255, 6) for s in std], resize=resize, crop=crop,
                crop_pct=round(min(crop) / resize, 4))


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


# ---- helpers ---------------------------------------------------------------------------------
def _hw(size) -> tuple[int, int]:
    return (int(size), int(size)) if isinstance(size, (int, float)) else \
        (int(size[0]), int(size[1]))


def _pooling(src: ExportSource) -> dict:
    """How the source pools: 'avg' (mean of patch tokens) or 'token' (cls); which norms."""
    sd = src.state_dict
    fc_norm, norm = 'fc_norm.weight' in sd, 'norm.weight' in sd
    avg = fc_norm or src.kwargs.get('out_type') == 'avg_featmap'
    return dict(pool='avg' if avg or not norm else 'token', fc_norm=fc_norm,
                any_norm=fc_norm or norm)


def _head_bias(head: dict) -> torch.Tensor:
    return head['bias'] if 'bias' in head else torch.zeros(head['weight'].shape[0])


def _identity_norm(name: str, width: int, like: dict) -> dict:
    dtype = next(iter(like.values())).dtype
    return {f'{name}.weight': torch.ones(width, dtype=dtype),
            f'{name}.bias': torch.zeros(width, dtype=dtype)}


def _expand_shared_table(sd: dict, num_layers: int) -> dict:
    table = sd.pop('rel_pos_bias.relative_position_bias_table')
    for i in range(num_layers):
        sd[f'blocks.{i}.rel_pos_bias.relative_position_bias_table'] = table.clone()
    return sd


def _split_qkv_bias(sd: dict, qkv_bias: str, num_layers: int) -> list[str]:
    """BEiT targets have q and v biases only (in place): a full qkv bias is split and its key
    part dropped (q . b_k is the same for every key, so the softmax is unchanged); no bias
    becomes zero q / v biases."""
    if qkv_bias == 'qv':
        return []
    for i in range(num_layers):
        if qkv_bias == 'qkv':
            q, _, v = sd.pop(f'blocks.{i}.attn.qkv.bias').chunk(3)
        else:
            proj = sd[f'blocks.{i}.attn.proj.weight']
            q = v = torch.zeros(proj.shape[1], dtype=proj.dtype)
        sd[f'blocks.{i}.attn.q_bias'], sd[f'blocks.{i}.attn.v_bias'] = q, v.clone()
    if qkv_bias == 'qkv':
        return ['the key bias of the qkv bias was dropped: BEiT has q and v biases only, and '
                'a key bias shifts all logits of a query equally (the outputs are unchanged)']
    return ['no qkv bias in the source: BEiT gets zero q and v biases']


def describe(exp: Export) -> str:
    """One line per tensor count and note, for the command line."""
    n = sum(v.numel() for v in exp.state_dict.values())
    return f'{len(exp.state_dict)} tensors, {n / 1e6:.2f} M values'
