"""Every downstream config feeds its ViT the inputs its pretraining fed it (the same mean, std
and channel order) and builds the ViT the checkpoint holds (the same width, depth, patch,
bias and position scheme).

The pairs are not listed by hand: a downstream config names its pretraining run through the
default `model.backbone.init_cfg.checkpoint`, `work_dirs/<config>/...`, where tools/train.py
writes `configs/**/<config>.py` (the toy configs read stage S of `configs/demo/S_*.py` from
`work_dirs/demo/S`)."""
import inspect
from functools import lru_cache
from pathlib import Path, PurePosixPath

import pytest
from mmengine.config import Config

ROOT = Path(__file__).resolve().parents[1]
# configs/study/ is chained by tools/study.py, which passes every checkpoint path itself
CONFIGS = sorted(p for p in (ROOT / 'configs').rglob('*.py')
                 if '_base_' not in p.parts and 'study' not in p.parts)


@lru_cache(maxsize=None)
def load(path: Path) -> Config:
    return Config.fromfile(str(path))


def backbone_checkpoint(cfg: Config) -> str | None:
    """The default pretrained-weights path of a config's backbone, if it has one."""
    init = (cfg.get('model') or {}).get('backbone', {}).get('init_cfg')
    if isinstance(init, dict) and init.get('type') == 'Pretrained':
        return init.get('checkpoint')
    return None


def config_writing(checkpoint: str) -> Path:
    """The shipped config whose training run writes `checkpoint` (a `work_dirs/...` path)."""
    parts = PurePosixPath(checkpoint).parts
    if parts[0] != 'work_dirs' or len(parts) < 3:
        raise ValueError(f'{checkpoint}: not a work_dirs/<run>/<file> path')
    if parts[1] == 'demo':  # the toy configs: stage S of configs/demo/S_*.py in work_dirs/demo/S
        found = sorted((ROOT / 'configs' / 'demo').glob(f'{parts[2]}_*.py'))
        # tokenizer_tiny_photos.py runs in tokenizer/, its variant
        # tokenizer_tiny_photos_lambda0.py in tokenizer_lambda0/: the stage's own config is the
        # shortest name
        found = [p for p in found if len(p.stem) == min(len(q.stem) for q in found)]
    else:
        found = [p for p in CONFIGS if p.stem == parts[1]]
    if len(found) != 1:
        raise LookupError(f'{checkpoint}: expected one config writing it, found {found}')
    return found[0]


def vit_input(cfg: Config) -> tuple:
    """(mean, std, channel order) of the images the ViT sees. mmengine's Runner uses the
    model's own data_preprocessor if it has one, else the top-level `data_preprocessor`
    (Runner.__init__: model.setdefault). Images are decoded BGR (mmcv), video frames RGB
    (mmaction2); `to_rgb` (mmpretrain, mmaction2) or `bgr_to_rgb` (mmseg, mmdet) flips them.
    For two-view pretraining the ViT's view is the first one (`mean`/`std`; `second_*` belong
    to the tokenizer)."""
    pre = cfg.model.get('data_preprocessor') or cfg.get('data_preprocessor') or {}
    mean, std = pre.get('mean'), pre.get('std')
    assert mean is not None and std is not None, 'no mean/std in the data preprocessor'
    flip = pre.get('to_rgb', pre.get('bgr_to_rgb', False))
    # mmaction2's video decoders (decord, PyAV, RawFrameDecode) give RGB frames, and its
    # ActionDataPreprocessor's to_rgb flips them to BGR
    decoded_rgb = cfg.get('default_scope') == 'mmaction'
    return tuple(map(float, mean)), tuple(map(float, std)), 'RGB' if flip != decoded_rgb else 'BGR'


def vit_layout(cfg: Config) -> dict:
    """The backbone arguments a checkpoint must match, with PeCoViT's defaults filled in.
    A shared relative-position table (pretraining) and per-block tables (downstream) are
    the same scheme: the loader copies the shared one into each block."""
    from peco_mm.models.vit import PeCoViT
    defaults = {k: v.default for k, v in inspect.signature(PeCoViT.__init__).parameters.items()}
    bb = {**defaults, **cfg.model.backbone}
    return dict(arch=bb['arch'], patch_size=bb['patch_size'], qkv_bias=bb['qkv_bias'],
                abs_pos=bb['use_abs_pos_emb'], rel_pos=bb['rel_pos_bias'] != 'none',
                layer_scale=bb['layer_scale_init_value'] > 0)


def find_pairs() -> list[tuple[Path, Path]]:
    pairs = []
    for path in CONFIGS:
        ckpt = backbone_checkpoint(load(path))
        if ckpt is not None and ckpt.startswith('work_dirs/'):
            pairs.append((config_writing(ckpt), path))
    return pairs


PAIRS = find_pairs()


def _name(p: Path) -> str:
    return str(p.relative_to(ROOT / 'configs'))


def test_pairs_cover_the_downstream_configs():
    """Every fine-tune, linear-probe, segmentation and detection config is paired, so a new
    one cannot slip past the check below."""
    downstream = {_name(d) for _, d in PAIRS}
    for kind in ('finetune_', 'linear_', 'upernet_', 'fpn_', 'mask_rcnn_', 'cascade_'):
        # the codeword probe (Table 4) reads a tokenizer, not a pretrained ViT
        shipped = {_name(p) for p in CONFIGS
                   if p.stem.startswith(kind) and p.parent.name == 'peco'
                   and load(p).model.backbone.type != 'CodewordPoolBackbone'}
        assert shipped and shipped <= downstream, shipped - downstream


@pytest.mark.parametrize('pretrain,downstream', PAIRS,
                         ids=[f'{_name(a)}->{_name(b)}' for a, b in PAIRS])
def test_downstream_normalises_as_its_pretraining(pretrain, downstream):
    pre = load(pretrain)
    assert pre.model.get('target_generator') is not None or pre.model.type == 'PeCoMAE', \
        f'{_name(pretrain)} is not a pretraining config'
    want, got = vit_input(pre), vit_input(load(downstream))
    assert got == want, (f'{_name(downstream)} feeds its ViT mean/std/order {got}, but '
                         f'{_name(pretrain)} pretrained it on {want}')


@pytest.mark.parametrize('pretrain,downstream', PAIRS,
                         ids=[f'{_name(a)}->{_name(b)}' for a, b in PAIRS])
def test_downstream_builds_the_pretrained_vit(pretrain, downstream):
    want, got = vit_layout(load(pretrain)), vit_layout(load(downstream))
    assert got == want, f'{_name(downstream)}: {got}; {_name(pretrain)}: {want}'


TOKENIZER_TARGETS = [p for p in CONFIGS
                     if (load(p).model.get('target_generator') or {}).get('type')
                     == 'FrozenPeCoTokenizer']


@pytest.mark.parametrize('pretrain', TOKENIZER_TARGETS, ids=_name)
def test_pretraining_names_a_tokenizer_a_shipped_config_trains(pretrain):
    """A frozen tokenizer takes its architecture from the checkpoint: the config names the file
    (written by a tokenizer config) and no argument FrozenPeCoTokenizer would refuse."""
    from peco_mm.tokenizer.frozen import FrozenPeCoTokenizer
    tg = dict(load(pretrain).model.target_generator)
    accepted = set(inspect.signature(FrozenPeCoTokenizer).parameters) - {'flat_arch'}
    unknown = set(tg) - {'type'} - accepted
    assert not unknown, f'{_name(pretrain)}: target_generator keys {sorted(unknown)} are refused'
    writer = config_writing(tg['checkpoint'])
    assert load(writer).model.type == 'PeCoTokenizer', f'{writer} does not train a tokenizer'
