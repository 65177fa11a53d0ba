"""What an export is read from: a PeCo pretraining run, a fine-tuned classifier or a dense
run's backbone, through the one conversion path, with its run's config and metrics; and the
tensor edits both targets share."""
from __future__ import annotations

import glob
import json
import os.path as osp
import re
from dataclasses import dataclass, field

import torch

from ...checkpoint import convert_checkpoint, parse_config_text, strip_prefix, unwrap
from .preprocessing import read_preprocessing


TARGETS = ('timm', 'hf')


KINDS = ('classifier', 'mim', 'backbone')


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
    run = dict(cfg=cfg, epoch=_stored_count(meta, 'epoch', path),
               iter=_stored_count(meta, 'iter', path),
               max_epochs=train_cfg.get('max_epochs'), max_iters=train_cfg.get('max_iters'),
               experiment=_stored_name(meta, path), source=path,
               classes=_stored_classes(meta, path))
    run['metrics'] = _hub_metrics(ckpt.get('message_hub')) or \
        (_scalar_metrics(osp.dirname(osp.abspath(path))) if path else {})
    return run


# what an export reads from a checkpoint's meta: plain leaves, bounded (never the text of an
# arbitrary stored object: a structure shared many times could expand without end)
MAX_CLASSES = 100_000
MAX_NAME_CHARS = 256


def _stored_classes(meta: dict, path: str | None) -> list[str] | None:
    """`meta.dataset_meta.classes`: a flat list (or tuple) of at most `MAX_CLASSES` strings
    of at most `MAX_NAME_CHARS` characters, or absent; anything else is refused."""
    dataset_meta = meta.get('dataset_meta')
    if dataset_meta is None:
        return None
    if not isinstance(dataset_meta, dict):
        raise ValueError(f'{path} meta.dataset_meta: a {type(dataset_meta).__name__}, '
                         'expected a dict; nothing was written')
    classes = dataset_meta.get('classes')
    if classes is None:
        return None
    found = None
    if type(classes) not in (list, tuple):
        found = f'a {type(classes).__name__}'
    elif len(classes) > MAX_CLASSES:
        found = f'{len(classes)} names'
    else:
        bad = next((i for i, c in enumerate(classes)
                    if type(c) is not str or len(c) > MAX_NAME_CHARS), None)
        if bad is not None:
            c = classes[bad]
            found = (f'item {bad} is a {type(c).__name__}' if type(c) is not str
                     else f'item {bad} has {len(c)} characters')
    if found:
        raise ValueError(f'{path} meta.dataset_meta.classes: expected a flat list of at most '
                         f'{MAX_CLASSES} class names, each a string of at most '
                         f'{MAX_NAME_CHARS} characters; found {found}; nothing was written')
    return list(classes)


def _stored_name(meta: dict, path: str | None) -> str | None:
    """`meta.experiment_name`: a string of at most `MAX_NAME_CHARS` characters, or absent."""
    name = meta.get('experiment_name')
    if name is not None and not (type(name) is str and len(name) <= MAX_NAME_CHARS):
        found = (f'{len(name)} characters' if type(name) is str
                 else f'a {type(name).__name__}')
        raise ValueError(f'{path} meta.experiment_name: expected a string of at most '
                         f'{MAX_NAME_CHARS} characters; found {found}; nothing was written')
    return name


def _stored_count(meta: dict, key: str, path: str | None) -> int | None:
    """`meta.epoch` / `meta.iter`: an integer, or absent."""
    value = meta.get(key)
    if value is not None and type(value) is not int:
        raise ValueError(f'{path} meta.{key}: expected an integer; found a '
                         f'{type(value).__name__}; nothing was written')
    return value


_TRAIN_KEYS = re.compile(r'^(train/|.*(loss|lr|time|memory|grad_norm))|^(epoch|iter|step)$')


def _hub_metrics(hub) -> dict:
    """Last values of the val/ and test/ scalars mmengine's message hub kept."""
    scalars = (hub or {}).get('log_scalars') if isinstance(hub, dict) else None
    out = {}
    for key, buf in (scalars or {}).items():
        if key.startswith(('val/', 'test/')) and not _TRAIN_KEYS.match(key.split('/', 1)[1]):
            # a HistoryBuffer, or its plain form in the launcher's checkpoints
            logs = (buf.get('log_history') if isinstance(buf, dict)
                    else (getattr(buf, 'data', None) or (None,))[0])
            if logs is not None and len(logs):
                out[key.split('/', 1)[1]] = float(logs[-1])
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
    head = _read_head(sd, path, kind)
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
    notes += read_preprocessing(run['cfg'], kwargs['img_size'], path)[1]  # checked here
    return ExportSource(state_dict=conv.state_dict, kwargs=kwargs, kind=kind, head=head,
                        run=run, notes=notes)


# the linear classifier of mmpretrain's heads: LinearClsHead (and PeCo's MIM head), and
# VisionTransformerClsHead without a hidden layer
HEAD_PREFIXES = ('head.fc.', 'head.layers.head.')


def _read_head(sd: dict, path: str | None, kind: str | None) -> dict:
    """The source's linear classifier ('weight', 'bias'), refusing one with a hidden layer
    unless only the backbone is asked for."""
    if 'head.layers.pre_logits.weight' in sd and kind != 'backbone':
        hidden = tuple(sd['head.layers.pre_logits.weight'].shape)
        raise ValueError(
            f'{path or "checkpoint"}: the classifier head has a hidden layer (mmpretrain '
            f'VisionTransformerClsHead hidden_dim={hidden[0]}: Linear, Tanh, Linear), which '
            "timm's and transformers' BEiT heads (one Linear) cannot hold; export the "
            'backbone with --kind backbone, or fine-tune with head=dict(hidden_dim=None)')
    for prefix in HEAD_PREFIXES:
        head = {n: sd[prefix + n] for n in ('weight', 'bias') if prefix + n in sd}
        if head:
            return head
    return {}


def _config_heads(backbone_cfg: dict, width: int) -> int | None:
    """The backbone's number of heads in a stored PeCoViT config (an override, an arch dict,
    or a preset name of the same width)."""
    from ...models.vit_config import ARCH_ZOO
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


# ---- helpers ---------------------------------------------------------------------------------
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
