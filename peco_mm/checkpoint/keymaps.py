"""Checkpoint conversion into `PeCoViT` weights: key names and ViT arguments.

PeCo initialises and evaluates ViTs from many sources: BEiT / PeCo release files, timm ViT and
BEiT, Hugging Face transformers BEiT, MAE, MoCo v3 (the perceptual network of the tokenizer,
Sec. 3.2 of the paper), DINO, mmpretrain and our own mmengine checkpoints. This module reads
each layout, renames its backbone weights to PeCoViT's (timm / unilm BEiT style) names, drops
what is not backbone (heads, decoders, projectors, predictors, BEiT's lm_head, index buffers),
infers the PeCoViT arguments that match the weights, and optionally expands a shared
relative-position table into per-block tables and resizes the position tables to another
image size (that step, from the weights' shapes, in `vit_args`).

    sd, kwargs = convert_state_dict(torch.load(path, weights_only=True))
    model = PeCoViT(**kwargs); model.load_state_dict(sd)

`tools/convert_checkpoint.py` is the command-line front end. The inverse maps (PeCoViT -> timm,
Hugging Face) live in `peco_mm.tooling.export`; the Hugging Face names are one table here
(`HF_BEIT_NAMES`), read in both directions.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch

from ..layers.pos_embed import REL_TABLE
from .reader import is_state_dict as _is_state_dict
from .reader import select_prefix as _select
from .reader import strip_prefix as _strip
from .reader import NESTING_KEYS, unknown_layout_message, unwrap
from .vit_args import adapt_tables, add_cls_position, infer_pecovit_kwargs

FORMATS = ('peco_mm', 'unilm_beit', 'timm_vit', 'timm_beit', 'mae', 'mocov3', 'dino',
           'mmpretrain', 'hf_beit')


@dataclass
class Conversion:
    """Everything one conversion produced: weights, matching PeCoViT arguments, and a report."""
    state_dict: dict[str, torch.Tensor]
    kwargs: dict
    fmt: str
    source: str  # where in the file the backbone was found, e.g. "ckpt['model']"
    dropped: dict[str, str] = field(default_factory=dict)  # source key -> reason
    unrecognised: list[str] = field(default_factory=list)  # source keys we cannot map
    notes: list[str] = field(default_factory=list)


# ---- step 1: find the format -----------------------------------------------------------------
def detect_format(ckpt: dict) -> str:
    """Name the layout of what `torch.load` returned; one of `FORMATS`.

    Raises ValueError listing the top-level keys (and a few inner keys) when no layout fits.
    """
    if not isinstance(ckpt, dict) or not ckpt:
        raise ValueError(f'expected a checkpoint dict, got {type(ckpt).__name__}'
                         f'{" (empty)" if isinstance(ckpt, dict) else ""}')
    if _is_state_dict(ckpt.get('teacher')) or _is_state_dict(ckpt.get('student')):
        return 'dino'
    if _is_state_dict(ckpt.get('model')):
        inner = _strip(ckpt['model'], 'module.')
        if _looks_beit(inner):
            return 'unilm_beit'
        if _looks_timm(inner):
            return 'mae'
        fmt = _classify_names(inner)
        if fmt:
            return fmt
    if _is_state_dict(ckpt.get('state_dict')):
        fmt = _classify_names(_strip(ckpt['state_dict'], 'module.'))
        if fmt:
            return fmt
    if _is_state_dict(ckpt):
        fmt = _classify_names(_strip(ckpt, 'module.'))
        if fmt:
            return fmt
    raise ValueError(_unknown_format_message(ckpt))


def _classify_names(sd: dict) -> str | None:
    keys = list(sd)
    pe = sd.get('pos_embed')
    cls_slot = pe is None or pe.ndim != 3 or math.isqrt(pe.shape[1]) ** 2 != pe.shape[1]
    if cls_slot and all(_PECOVIT_NAMES.match(k) or k.startswith('pyramid.') for k in keys):
        return 'peco_mm'  # already PeCoViT's names (e.g. a tools/convert_checkpoint.py file)
    if any(k.startswith('base_encoder.') for k in keys):
        return 'mocov3'
    if any(k.startswith(('beit.embeddings.', 'embeddings.patch_embeddings.')) for k in keys):
        return 'hf_beit'  # transformers' BeitModel / BeitFor* (save_pretrained's names)
    if any(k.startswith(('backbone.layers.', 'backbone.patch_embed.projection.')) for k in keys):
        return 'mmpretrain'
    if any(k.startswith(('backbone.blocks.', 'backbone.patch_embed.proj.')) for k in keys):
        return 'peco_mm'
    if any(k.startswith('layers.') for k in keys) and 'patch_embed.projection.weight' in sd:
        return 'mmpretrain'  # a bare mmpretrain backbone
    if any(re.match(r'blocks\.\d+\.rel_pos_bias\.', k) for k in keys):
        return 'peco_mm'  # a bare PeCoViT (per-block tables live outside attn)
    if _looks_beit(sd):
        return 'timm_beit'
    if _looks_timm(sd):
        return 'timm_vit'
    return None


def _looks_timm(sd: dict) -> bool:
    return 'patch_embed.proj.weight' in sd and any(
        re.match(r'blocks\.\d+\.attn\.qkv\.weight$', k) for k in sd)


def _looks_beit(sd: dict) -> bool:
    return _looks_timm(sd) and any(
        k.endswith(('attn.q_bias', REL_TABLE, '.gamma_1')) or k.startswith('lm_head.')
        for k in sd)


def _unknown_format_message(ckpt: dict) -> str:
    return unknown_layout_message(ckpt, (
        f'. Expected one of {FORMATS}: timm / MAE / DINO / BEiT names '
        "(patch_embed.proj, blocks.N.attn.qkv), MoCo v3 'module.base_encoder.*', "
        "mmpretrain / peco_mm 'backbone.*', Hugging Face 'beit.embeddings.*'; pass the "
        'format explicitly if it is one of these under another wrapper key'))


# ---- step 2: take the backbone out of the file layout ----------------------------------------
def extract_backbone(ckpt: dict, fmt: str) -> tuple[dict, str, dict[str, str]]:
    """Return (backbone state dict with the format's own names, where it was, dropped keys)."""
    if fmt not in FORMATS:
        raise ValueError(f'format={fmt!r}; allowed: {FORMATS}')
    dropped: dict[str, str] = {}
    if fmt == 'dino':
        side = 'teacher' if _is_state_dict(ckpt.get('teacher')) else (
            'student' if _is_state_dict(ckpt.get('student')) else None)
        if side is None:  # a released DINO backbone: plain timm names
            sd, where = _inner(ckpt)
            return _strip(sd, 'module.'), where, dropped
        if side == 'teacher' and _is_state_dict(ckpt.get('student')):
            dropped.update({f'student.{k}': 'DINO student (the teacher is used)'
                            for k in ckpt['student']})
        sd = _strip(ckpt[side], 'module.')
        return _select(sd, 'backbone.', dropped, 'DINO head / not backbone'), \
            f"ckpt['{side}']['backbone.*']", dropped
    if fmt == 'mocov3':
        sd, where = _inner(ckpt)
        sd = _strip(sd, 'module.')
        return _select(sd, 'base_encoder.', dropped, 'MoCo v3 momentum encoder / predictor'), \
            f"{where}['module.base_encoder.*']", dropped
    if fmt in ('mmpretrain', 'peco_mm'):
        sd, where = _inner(ckpt)
        sd = _strip(sd, 'module.')
        if any(k.startswith('backbone.') for k in sd):
            sd = _select(sd, 'backbone.', dropped, 'not backbone (head / neck / tokenizer)')
            where += "['backbone.*']"
        return sd, where, dropped
    sd, where = _inner(ckpt)  # timm_vit, timm_beit, mae, unilm_beit, hf_beit
    return _strip(sd, 'module.'), where, dropped


def _inner(ckpt: dict) -> tuple[dict, str]:
    try:
        return unwrap(ckpt)
    except ValueError:
        raise ValueError(_unknown_format_message(ckpt)) from None


# ---- step 3: rename to PeCoViT names ---------------------------------------------------------
# (pattern on the source name, replacement) for mmpretrain's VisionTransformer / BEiTViT
_MMPRETRAIN_RENAMES: list[tuple[str, str]] = [
    (r'^patch_embed\.projection\.', 'patch_embed.proj.'),
    (r'^layers\.(\d+)\.ln1\.', r'blocks.\1.norm1.'),
    (r'^layers\.(\d+)\.ln2\.', r'blocks.\1.norm2.'),
    (r'^layers\.(\d+)\.attn\.gamma1\.weight$', r'blocks.\1.gamma_1'),
    (r'^layers\.(\d+)\.ffn\.gamma2\.weight$', r'blocks.\1.gamma_2'),
    (r'^layers\.(\d+)\.ffn\.layers\.0\.0\.', r'blocks.\1.mlp.fc1.'),
    (r'^layers\.(\d+)\.ffn\.layers\.1\.', r'blocks.\1.mlp.fc2.'),
    (r'^layers\.(\d+)\.attn\.relative_position_bias_table$',
     r'blocks.\1.rel_pos_bias.relative_position_bias_table'),
    (r'^layers\.(\d+)\.', r'blocks.\1.'),  # attn.qkv/proj/q_bias/v_bias, gamma_1/gamma_2
    (r'^ln1\.', 'norm.'),
    (r'^ln2\.', 'fc_norm.'),
]
# timm ViT / BEiT / MAE / MoCo v3 / DINO / unilm BEiT -> PeCoViT
_TIMM_RENAMES: list[tuple[str, str]] = [
    (r'^blocks\.(\d+)\.ls1\.gamma$', r'blocks.\1.gamma_1'),
    (r'^blocks\.(\d+)\.ls2\.gamma$', r'blocks.\1.gamma_2'),
    (r'^blocks\.(\d+)\.attn\.relative_position_bias_table$',
     r'blocks.\1.rel_pos_bias.relative_position_bias_table'),
]
# PeCoViT name <-> transformers BEiT name (`BeitModel`'s own; the BeitFor* heads prefix them with
# 'beit.'), read both ways; {i}: block index, {p}: weight | bias. The fused qkv weight is
# three tensors there (query / key / value); `hf_qkv_names` names them.
HF_BEIT_NAMES: list[tuple[str, str]] = [
    ('cls_token', 'embeddings.cls_token'),
    ('mask_token', 'embeddings.mask_token'),
    ('pos_embed', 'embeddings.position_embeddings'),
    ('patch_embed.proj.{p}', 'embeddings.patch_embeddings.projection.{p}'),
    ('rel_pos_bias.relative_position_bias_table',
     'encoder.relative_position_bias.relative_position_bias_table'),
    ('blocks.{i}.norm1.{p}', 'encoder.layer.{i}.layernorm_before.{p}'),
    ('blocks.{i}.norm2.{p}', 'encoder.layer.{i}.layernorm_after.{p}'),
    ('blocks.{i}.gamma_1', 'encoder.layer.{i}.lambda_1'),
    ('blocks.{i}.gamma_2', 'encoder.layer.{i}.lambda_2'),
    ('blocks.{i}.attn.q_bias', 'encoder.layer.{i}.attention.attention.query.bias'),
    ('blocks.{i}.attn.v_bias', 'encoder.layer.{i}.attention.attention.value.bias'),
    ('blocks.{i}.attn.proj.{p}', 'encoder.layer.{i}.attention.output.dense.{p}'),
    ('blocks.{i}.rel_pos_bias.relative_position_bias_table',
     'encoder.layer.{i}.attention.attention.relative_position_bias.relative_position_bias_table'),
    ('blocks.{i}.mlp.fc1.{p}', 'encoder.layer.{i}.intermediate.dense.{p}'),
    ('blocks.{i}.mlp.fc2.{p}', 'encoder.layer.{i}.output.dense.{p}'),
    ('norm.{p}', 'layernorm.{p}'),  # BeitModel's final norm, or BeitForMaskedImageModeling's
    ('fc_norm.{p}', 'pooler.layernorm.{p}'),  # the norm after mean pooling
]


def hf_qkv_names(i: int) -> list[str]:
    """transformers' query / key / value weights of block i (PeCoViT: one fused qkv)."""
    return [f'encoder.layer.{i}.attention.attention.{n}.weight' for n in ('query', 'key', 'value')]


def _template_regex(template: str) -> re.Pattern:
    pattern = re.escape(template).replace(r'\{i\}', r'(?P<i>\d+)').replace(
        r'\{p\}', '(?P<p>weight|bias)')
    return re.compile(pattern + '$')


def rename_by_table(name: str, table: list[tuple[str, str]], inverse: bool = False
                    ) -> str | None:
    """`name` through a (ours, theirs) template table (theirs -> ours, or ours -> theirs with
    `inverse`); None when no row matches."""
    for ours, theirs in table:
        src, dst = (ours, theirs) if inverse else (theirs, ours)
        m = _template_regex(src).match(name)
        if m:
            return dst.format(**m.groupdict())
    return None


def hf_to_pecovit(sd: dict, dropped: dict[str, str]) -> dict:
    """transformers BEiT names -> PeCoViT names (unmatched keys are kept, to be reported);
    query / key / value are fused into qkv (the key has no bias there, as in BEiT)."""
    inner = _strip(sd, 'beit.')
    if 'beit.layernorm.weight' in sd and 'layernorm.weight' in sd:
        raise ValueError('the checkpoint has both beit.layernorm and a masked-image-modeling '
                         'layernorm (two norms in a row); PeCoViT has one final norm')
    out: dict = {}
    for i in sorted({int(m.group(1)) for k in inner
                     if (m := re.match(r'encoder\.layer\.(\d+)\.', k))}):
        names = hf_qkv_names(i)
        if all(n in inner for n in names):
            out[f'blocks.{i}.attn.qkv.weight'] = torch.cat([inner.pop(n) for n in names])
    for key, value in inner.items():
        new = rename_by_table(key, HF_BEIT_NAMES)
        out[new if new is not None else key] = value
    return out


# source names that are not backbone weights, with the reason printed for them
_DROP_RULES: list[tuple[str, str]] = [
    (r'relative_position_index$', 'index buffer (rebuilt by PeCoViT)'),
    (r'^(head|head_dist|attn_pool|pre_logits|classifier)\.', 'classification head'),
    (r'^lm_head\.', 'BEiT MIM head (lm_head)'),
    (r'^cls_pt_layers\.', 'BEiT v2 patch-aggregation pretraining layers'),
    (r'^decoder_|^decoder\.', 'MAE decoder'),
    (r'^(predictor|projector|momentum_encoder)\.', 'MoCo / BYOL projector or predictor'),
    (r'^pyramid\.', 'PeCoViT pyramid adapter (task-specific)'),
]
# every name PeCoViT may hold; anything else is reported as unrecognised
_PECOVIT_NAMES = re.compile(
    r'^(cls_token|mask_token|pos_embed|patch_embed\.proj\.(weight|bias)'
    r'|rel_pos_bias\.relative_position_bias_table|(norm|fc_norm)\.(weight|bias)'
    r'|blocks\.\d+\.(norm1\.(weight|bias)|norm2\.(weight|bias)|attn\.qkv\.(weight|bias)'
    r'|attn\.(q_bias|v_bias)|attn\.proj\.(weight|bias)|mlp\.fc[12]\.(weight|bias)'
    r'|gamma_1|gamma_2|rel_pos_bias\.relative_position_bias_table))$')


def rename_to_pecovit(sd: dict, fmt: str, dropped: dict[str, str]
                      ) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Map a backbone state dict to PeCoViT names; return (renamed, unrecognised keys)."""
    renames = _MMPRETRAIN_RENAMES if fmt == 'mmpretrain' else _TIMM_RENAMES
    if fmt == 'hf_beit':
        sd, renames = hf_to_pecovit(sd, dropped), []
    out: dict[str, torch.Tensor] = {}
    unrecognised = []
    for key, value in sd.items():
        reason = next((r for pat, r in _DROP_RULES if re.search(pat, key)), None)
        if reason is None and key == 'mask_token' and fmt == 'mae':
            reason = 'MAE decoder mask token'
        if reason is not None:
            dropped[key] = reason
            continue
        if not torch.is_tensor(value):
            unrecognised.append(key)
            continue
        new = key
        for pat, rep in renames:
            new, n = re.subn(pat, rep, new)
            if n:
                break
        if not _PECOVIT_NAMES.match(new):
            unrecognised.append(key)
            continue
        out[new] = value
    return out, unrecognised


# ---- the whole conversion --------------------------------------------------------------------
def convert_checkpoint(ckpt: dict, fmt: str | None = None,
                       img_size: int | tuple[int, int] | None = None,
                       per_block_rel_pos: bool = False) -> Conversion:
    """Convert what `torch.load` returned; see the module docstring. Returns a `Conversion`."""
    if fmt is None:
        fmt = detect_format(ckpt)
    elif fmt not in FORMATS:
        raise ValueError(f'format={fmt!r}; allowed: {FORMATS}')
    sd, where, dropped = extract_backbone(ckpt, fmt)
    sd, unrecognised = rename_to_pecovit(sd, fmt, dropped)
    if 'norm.weight' in sd and 'fc_norm.weight' in sd:
        # PeCoViT has fc_norm only without a final norm (BEiT / MAE fine-tuning style)
        for k in ('fc_norm.weight', 'fc_norm.bias'):
            if k in sd:
                sd.pop(k)
                dropped[k] = 'fc_norm next to a final norm (PeCoViT keeps one of the two)'
    width = sd['patch_embed.proj.weight'].shape[0] if 'patch_embed.proj.weight' in sd else None
    if 'mask_token' in sd and sd['mask_token'].shape[-1] != width:
        sd.pop('mask_token')
        dropped['mask_token'] = f'mask token of width != embed_dims={width} (a decoder\'s)'
    notes: list[str] = []
    add_cls_position(sd, notes)
    kwargs, guessed = infer_pecovit_kwargs(sd, img_size)
    notes += guessed
    adapt_tables(sd, kwargs, img_size, per_block_rel_pos, notes)
    if not kwargs['final_norm'] and 'fc_norm.weight' not in sd:
        notes.append('no final norm in the checkpoint: final_norm=False')
    return Conversion(state_dict=sd, kwargs=kwargs, fmt=fmt, source=where, dropped=dropped,
                      unrecognised=unrecognised, notes=notes)


def convert_state_dict(ckpt: dict, fmt: str | None = None,
                       img_size: int | tuple[int, int] | None = None,
                       per_block_rel_pos: bool = False
                       ) -> tuple[dict[str, torch.Tensor], dict]:
    """(state dict with PeCoViT names, PeCoViT kwargs inferred from the weights).

    Pure: prints nothing. Keys that cannot be mapped raise ValueError; for the list of dropped
    (non-backbone) keys and the notes, call `convert_checkpoint`, which returns them.
    """
    conv = convert_checkpoint(ckpt, fmt, img_size, per_block_rel_pos)
    if conv.unrecognised:
        raise ValueError(f'{conv.fmt} checkpoint: cannot map these keys to PeCoViT: '
                         f'{conv.unrecognised}')
    return conv.state_dict, conv.kwargs


# ---- the tokenizer's and the CNN perceptual networks' key maps ------------------------------
TOKENIZER_WRAPPERS = ('module.', 'target_generator.', 'tokenizer.')
CNN_WRAPPERS = ('module.encoder_q.', 'module.base_encoder.', 'encoder_q.', 'base_encoder.',
                'module.', 'backbone.')


def tokenizer_state_dict(ckpt: dict) -> dict:
    """The state dict of a tokenizer checkpoint with a DDP / pretraining prefix stripped, so
    that the tokenizer's keys read `encoder.*`, `quantizer.*`, `decoder.*`."""
    sd = ckpt.get('state_dict', ckpt)
    for prefix in TOKENIZER_WRAPPERS:
        if any(k.startswith(prefix + 'encoder.') for k in sd):
            sd = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
    return sd


def cnn_backbone_state_dict(ckpt) -> dict | None:
    """A torchvision ResNet / VGG state dict from a torchvision file or a MoCo v1/v2
    (`module.encoder_q.*`), MoCo v3 (`module.base_encoder.*`), DDP or mmpretrain file; None
    when the file holds no dict."""
    sd = ckpt
    for key in NESTING_KEYS:
        if isinstance(sd, dict) and isinstance(sd.get(key), dict):
            sd = sd[key]
    if not isinstance(sd, dict):
        return None
    for prefix in CNN_WRAPPERS:
        if any(k.startswith(prefix) for k in sd):
            return {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
    return sd
