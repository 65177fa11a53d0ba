"""Export to timm and Hugging Face transformers, checked by loading the files on the other side.

Each source is a tiny PeCoViT (width 64, depth 2, 4 heads) with random weights, saved the way
the runs save it (`backbone.*`, the head, `meta.cfg`). The exported folder alone builds the
model in timm / transformers, whose tokens after the last block and logits must match
PeCoViT's within 1e-4; reading the export back with the converter gives PeCoViT weights equal
bit for bit.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from peco_mm.checkpoint import convert_checkpoint, read_checkpoint
from peco_mm.tooling.export import (CITATION_BIBTEX, read_config_text, read_export_source,
                                    timm_file_call, to_hf, to_timm, write_export)
from peco_mm.models.vit import PeCoViT
from tests.conftest import randomize

timm = pytest.importorskip('timm')
transformers = pytest.importorskip('transformers')
pytest.importorskip('safetensors')

ROOT = Path(__file__).resolve().parents[2]
ATOL = 1e-4
TINY = dict(arch='test')  # 64 wide, 2 blocks, 4 heads
CLASSES = ['cat', 'dog', 'fox', 'owl', 'yak']

# source -> (PeCoViT arguments, model type in meta.cfg, head classes, extra config text)
SOURCES = {
    # BEiT-style fine-tuning: per-block tables, mean pooling + fc_norm, ImageNet statistics
    'classifier': (dict(img_size=32, patch_size=8, qkv_bias='qv', use_abs_pos_emb=False,
                        rel_pos_bias='per_block', layer_scale_init_value=0.1,
                        out_type='avg_featmap', final_norm=False), 'ImageClassifier', 5, ''),
    # PeCo pretraining: shared table, [MASK], final norm, the K-way code classifier
    'mim': (dict(img_size=32, patch_size=8, qkv_bias='qv', use_abs_pos_emb=False,
                 rel_pos_bias='shared', layer_scale_init_value=0.1, use_mask_token=True),
            'PeCo', 16, "tokenizer_checkpoint = 'work_dirs/tok/epoch_100.pth'\n"),
    # a dense run's backbone: raw block outputs, no final norm
    'dense': (dict(img_size=32, patch_size=8, qkv_bias='qv', use_abs_pos_emb=False,
                   rel_pos_bias='per_block', layer_scale_init_value=0.1, out_type='featmap',
                   final_norm=False), 'EncoderDecoder', 0, ''),
    # PeCo_MAE fine-tuning (MAE's ViT: qkv bias, absolute positions): timm VisionTransformer
    'mae_classifier': (dict(img_size=32, patch_size=8, qkv_bias='qkv', out_type='avg_featmap',
                            final_norm=False), 'ImageClassifier', 5, ''),
    # ViT-H/14 at a non-224 size in miniature: patch 14, 56 px, a linear probe (cls token,
    # final norm, BatchNorm neck folded into the classifier), mmpretrain's 127.5 statistics
    'probe_p14': (dict(img_size=56, patch_size=14, qkv_bias='qv', use_abs_pos_emb=False,
                       rel_pos_bias='per_block', layer_scale_init_value=1e-5,
                       out_type='cls_token'), 'ImageClassifier', 5,
                  'data_preprocessor = dict(mean=[127.5, 127.5, 127.5], '
                  'std=[127.5, 127.5, 127.5], to_rgb=True)\n'),
    # a BEiT-style classifier without layer scale: timm's Beit must be told init_values=None
    'no_layer_scale': (dict(img_size=32, patch_size=8, qkv_bias='qv', use_abs_pos_emb=False,
                            rel_pos_bias='per_block', out_type='avg_featmap', final_norm=False),
                       'ImageClassifier', 5, ''),
}


class Source:
    """A PeCoViT, its head, and the checkpoint a run would save for them."""

    def __init__(self, name: str, seed: int = 0):
        kwargs, model_type, classes, extra_cfg = SOURCES[name]
        self.name, self.kwargs = name, kwargs
        self.vit = randomize(PeCoViT(**TINY, **kwargs), seed)
        g = torch.Generator().manual_seed(seed + 100)
        sd = {f'backbone.{k}': v for k, v in self.vit.state_dict().items()}
        self.head = None
        if classes:
            self.head = nn.Linear(64, classes).eval()
            with torch.no_grad():
                self.head.weight.copy_(torch.randn(classes, 64, generator=g) * 0.2)
                self.head.bias.copy_(torch.randn(classes, generator=g))
            sd.update({f'head.fc.{k}': v for k, v in self.head.state_dict().items()})
        self.neck = None
        if name == 'probe_p14':  # ClsBatchNormNeck(affine=False, eps=1e-6) in eval mode
            self.neck = nn.BatchNorm1d(64, affine=False, eps=1e-6).eval()
            self.neck.running_mean.copy_(torch.randn(64, generator=g))
            self.neck.running_var.copy_(torch.rand(64, generator=g) + 0.5)
            sd.update({f'neck.bn.{k}': v for k, v in self.neck.state_dict().items()})
        if model_type == 'PeCo':
            sd['target_generator.quantizer.embedding'] = torch.randn(classes, 8, generator=g)
        if model_type == 'EncoderDecoder':
            sd['decode_head.conv_seg.weight'] = torch.randn(3, 64, 1, 1, generator=g)
        backbone = ', '.join(f'{k}={v!r}' for k, v in kwargs.items())
        cfg = (f"model = dict(type='{model_type}', backbone=dict(type='PeCoViT', "
               f"arch='test', {backbone}))\n{extra_cfg}"
               'train_cfg = dict(type="EpochBasedTrainLoop", max_epochs=800)\n')
        meta = dict(cfg=cfg, epoch=800, iter=8000, experiment_name=f'tiny_{name}')
        if classes and model_type == 'ImageClassifier':
            meta['dataset_meta'] = dict(classes=tuple(CLASSES))
        self.ckpt = {'meta': meta, 'state_dict': sd}
        self.images = torch.randn(2, 3, kwargs['img_size'], kwargs['img_size'],
                                  generator=torch.Generator().manual_seed(seed + 7))

    def save(self, path: Path) -> str:
        torch.save(self.ckpt, path)
        return str(path)

    @torch.no_grad()
    def tokens(self, mask=None) -> torch.Tensor:
        """(B, 1+N, C) after the last block and the final norm (raw without one)."""
        return self.vit.forward_features(self.images, mask)

    @torch.no_grad()
    def raw_tokens(self, mask=None) -> torch.Tensor:
        return self.vit.forward_intermediates(self.images, [-1], mask, output_fmt='NLC')[0]

    @torch.no_grad()
    def logits(self) -> torch.Tensor:
        pooled = self.vit(self.images)[0]  # (B, C)
        return self.head(self.neck(pooled) if self.neck is not None else pooled)


def export(src: Source, target: str, tmp_path: Path, **kw):
    source = read_export_source(src.ckpt, str(tmp_path / 'run' / 'epoch_800.pth'))
    exp = to_timm(source, **kw) if target == 'timm' else to_hf(source)
    dst = tmp_path / f'{src.name}_{target}'
    write_export(exp, str(dst))
    return exp, dst, source


# ---- timm --------------------------------------------------------------------------------------
@pytest.mark.parametrize('name', ['classifier', 'mim', 'dense', 'mae_classifier', 'probe_p14',
                                  'no_layer_scale'])
@torch.no_grad()
def test_timm_loads_the_export_and_matches(name, tmp_path):
    src = Source(name)
    exp, dst, source = export(src, 'timm', tmp_path)
    model = timm.create_model(f'local-dir:{dst}', pretrained=True).eval()
    expected_cls = timm.models.VisionTransformer if name == 'mae_classifier' else \
        timm.models.beit.Beit
    assert type(model) is expected_cls
    tokens = model.forward_features(src.images)
    expected = src.tokens()
    assert tokens.shape == expected.shape and expected.std() > 0.1
    torch.testing.assert_close(tokens, expected, atol=ATOL, rtol=0)
    if name in ('mim', 'dense'):  # timm has no MIM head: the backbone's pooled output
        assert model.num_classes == 0
        if name == 'mim':
            torch.testing.assert_close(model(src.images), src.vit(src.images)[0], atol=ATOL,
                                       rtol=0)
    else:
        torch.testing.assert_close(model(src.images), src.logits(), atol=ATOL, rtol=0)
        assert model.pretrained_cfg['label_names'] == CLASSES
    # the file alone, with the printed call
    alone = eval(timm_file_call(exp, str(dst)), {'timm': timm}).eval()  # noqa: S307
    torch.testing.assert_close(alone.forward_features(src.images), tokens, atol=0, rtol=0)
    # normalisation as the run's: ImageNet statistics, or the config's 127.5
    mean = model.pretrained_cfg['mean']
    assert mean == ([0.5] * 3 if name == 'probe_p14' else [0.485, 0.456, 0.406])


@torch.no_grad()
def test_timm_per_block_copy_of_a_shared_table(tmp_path):
    src = Source('mim')
    _, dst, _ = export(src, 'timm', tmp_path, per_block_rel_pos=True)
    model = timm.create_model(f'local-dir:{dst}', pretrained=True).eval()
    assert model.rel_pos_bias is None
    table = src.vit.rel_pos_bias.relative_position_bias_table
    for blk in model.blocks:
        assert torch.equal(blk.attn.relative_position_bias_table, table)
    torch.testing.assert_close(model.forward_features(src.images), src.tokens(), atol=ATOL,
                               rtol=0)


# ---- Hugging Face transformers -----------------------------------------------------------------
@pytest.mark.parametrize('name', ['classifier', 'mim', 'dense', 'mae_classifier', 'probe_p14'])
@torch.no_grad()
def test_transformers_loads_the_export_and_matches(name, tmp_path):
    src = Source(name)
    exp, dst, source = export(src, 'hf', tmp_path)
    config = transformers.AutoConfig.from_pretrained(dst)
    cls = getattr(transformers, config.architectures[0])
    model = cls.from_pretrained(dst).eval()
    shared = SOURCES[name][0].get('rel_pos_bias') == 'shared'
    assert config.use_shared_relative_position_bias is shared
    beit = model if isinstance(model, transformers.BeitModel) else model.beit
    x = src.images
    if name == 'mim':
        assert cls is transformers.BeitForMaskedImageModeling
        mask = torch.zeros(2, 16, dtype=torch.bool)
        mask[:, [1, 5, 6, 10]] = True
        hidden = beit(x, bool_masked_pos=mask).last_hidden_state
        torch.testing.assert_close(hidden, src.raw_tokens(mask), atol=ATOL, rtol=0)
        logits = model(x, bool_masked_pos=mask).logits  # (B, N, K)
        torch.testing.assert_close(logits, src.head(src.tokens(mask))[:, 1:], atol=ATOL, rtol=0)
        assert config.vocab_size == 16
        return
    hidden = beit(x).last_hidden_state
    assert hidden.std() > 0.1
    torch.testing.assert_close(hidden, src.tokens(), atol=ATOL, rtol=0)
    if src.head is None:
        assert cls is transformers.BeitModel
        return
    assert cls is transformers.BeitForImageClassification
    torch.testing.assert_close(model(x).logits, src.logits(), atol=ATOL, rtol=0)
    assert [config.id2label[i] for i in range(5)] == CLASSES


RUN_PIPELINE = ("[dict(type='LoadImageFromFile'), dict(type='ResizeEdge', scale=40, "
                "edge='short', backend='pillow', interpolation='bicubic'), "
                "dict(type='CenterCrop', crop_size=32), dict(type='PackInputs')]")
# where a run sets its test pipeline: the top level, only in its test data loader (the
# top-level one, if any, being another), or in a wrapped val dataset
PIPELINE_PLACES = {
    'top_level': f'test_pipeline = {RUN_PIPELINE}\n',
    'test_dataloader': ("test_pipeline = [dict(type='ResizeEdge', scale=256, edge='short'), "
                        "dict(type='CenterCrop', crop_size=224)]\n"
                        f'test_dataloader = dict(dataset=dict(pipeline={RUN_PIPELINE}))\n'),
    'val_dataloader': ('test_dataloader = None\nval_dataloader = dict(dataset=dict('
                       f"type='RepeatDataset', dataset=dict(pipeline={RUN_PIPELINE})))\n"),
}


@pytest.mark.parametrize('place', list(PIPELINE_PLACES))
@torch.no_grad()
def test_transformers_image_processor_normalises_as_the_run(place, tmp_path):
    """The exported processor turns an image into what the run's test pipeline (ResizeEdge
    short side + CenterCrop) and data preprocessor (mean / std on 0..255 RGB) give, wherever
    the run sets that pipeline; a top-level test_pipeline the run did not use is named. The
    image's short side is the resize already (shrinking, the processor's kernel rounds apart
    from PIL's: test_export_pixels.py) and its long side leaves a margin of 23: the run starts
    the crop at round(11.5) = 12."""
    from mmpretrain.datasets.transforms import CenterCrop, ResizeEdge
    from PIL import Image
    src = Source('classifier')
    src.ckpt['meta']['cfg'] += PIPELINE_PLACES[place]
    exp, dst, _ = export(src, 'hf', tmp_path)
    differs = [n for n in exp.notes if 'top-level test_pipeline resizes or crops' in n]
    assert len(differs) == (place == 'test_dataloader')
    assert all(n in (dst / 'README.md').read_text() for n in differs)
    assert 'test resize (short side) 40, centre crop 32x32' in (dst / 'README.md').read_text()
    rgb = torch.randint(0, 256, (40, 55, 3), generator=torch.Generator().manual_seed(3),
                        dtype=torch.uint8).numpy()
    processor = transformers.AutoImageProcessor.from_pretrained(dst)
    ours = processor(Image.fromarray(rgb), return_tensors='pt')['pixel_values']
    results = dict(img=rgb[..., ::-1].copy())  # mmcv loads BGR
    for t in (ResizeEdge(scale=40, edge='short', backend='pillow', interpolation='bicubic'),
              CenterCrop(crop_size=32)):
        results = t(results)
    img = torch.from_numpy(results['img'][..., ::-1].copy()).permute(2, 0, 1).float()
    mean = torch.tensor([123.675, 116.28, 103.53]).view(3, 1, 1)
    std = torch.tensor([58.395, 57.12, 57.375]).view(3, 1, 1)
    assert ours.shape == (1, 3, 32, 32)
    torch.testing.assert_close(ours[0], (img - mean) / std, atol=1e-5, rtol=0)


def test_model_card_from_the_run(tmp_path):
    src = Source('mim')
    _, dst, _ = export(src, 'hf', tmp_path)
    card = (dst / 'README.md').read_text()
    assert 'library_name: transformers' in card and 'masked-image-modeling' in card
    assert "model type: `PeCo`" in card and 'training: epoch 800 of 800 (pretraining)' in card
    assert 'work_dirs/tok/epoch_100.pth' in card and 'K = 16 codewords' in card
    assert CITATION_BIBTEX in card
    assert 'recorded no evaluation metrics' in card
    # metrics: the last evaluation record of the run folder's scalars.json
    run = tmp_path / 'run' / '20260101_000000' / 'vis_data'
    run.mkdir(parents=True)
    (run / 'scalars.json').write_text('{"loss": 2.0, "lr": 0.1, "iter": 1, "step": 1}\n'
                                      '{"accuracy/top1": 71.25, "step": 2}\n')
    src = Source('classifier')
    _, dst, _ = export(src, 'timm', tmp_path)
    card = (dst / 'README.md').read_text()
    assert '| accuracy/top1 | 71.25 |' in card and 'loss' not in card.split('## Metrics')[1]
    assert "timm.create_model('local-dir:PATH_TO_THIS_FOLDER', pretrained=True)" in card


def test_model_card_shows_the_runs_text_never_renders_it(tmp_path):
    """Class names, experiment name and metric keys come from the checkpoint: the card shows
    them as text (HTML escaped, or in a code span it cannot leave), never as markup."""
    markdown_it = pytest.importorskip('markdown_it')
    src = Source('classifier')
    src.ckpt['meta']['experiment_name'] = 'run`<script>alert(1)</script>`'
    src.ckpt['meta']['cfg'] += "model = dict(type='ImageClassifier', backbone='PeCoViT')\n"
    src.ckpt['meta']['dataset_meta'] = dict(classes=('<img src=x onerror=alert(2)>', 'a|b',
                                                     'fox', 'owl', 'yak'))
    run = tmp_path / 'run' / '20260101_000000' / 'vis_data'
    run.mkdir(parents=True)
    (run / 'scalars.json').write_text('{"<b>top1</b>|x": 71.25, "step": 2}\n')
    _, dst, _ = export(src, 'timm', tmp_path)
    card = (dst / 'README.md').read_text()
    page = markdown_it.MarkdownIt('commonmark').enable('table').render(card)
    assert '<script' not in page and '<img' not in page and '<b>' not in page
    assert '&lt;img src=x onerror=alert(2)&gt;' in page and 'a|b' in page
    assert '<td>&lt;b&gt;top1&lt;/b&gt;|x</td>' in page  # one cell, the | kept as text
    assert "<code>run'&lt;script&gt;alert(1)&lt;/script&gt;'</code>" in page
    assert '(backbone <code>?</code>)' in page  # a backbone that is no dict: not a traceback


def test_cli_keeps_an_edited_readme_unless_asked(tmp_path, capsys):
    from tests.conftest import load_tool
    tool = load_tool('export_checkpoint')
    ckpt = Source('classifier').save(tmp_path / 'epoch_800.pth')
    dst = tmp_path / 'out'
    readme = dst / 'README.md'
    for _ in range(2):  # the same export again: the card is the same, nothing to keep
        assert tool.main([ckpt, str(dst), '--to', 'timm']) == 0
    readme.write_text('# my own card\n')
    (dst / 'config.json').unlink()
    assert tool.main([ckpt, str(dst), '--to', 'timm']) == 1
    err = capsys.readouterr().err
    assert 'README.md exists and is not the model card' in err and '--overwrite-readme' in err
    assert readme.read_text() == '# my own card\n' and not (dst / 'config.json').exists()
    assert tool.main([ckpt, str(dst), '--to', 'timm', '--overwrite-readme']) == 0
    assert readme.read_text().startswith('---\nlibrary_name: timm')


def test_citation_matches_citation_cff():
    import yaml
    cff = yaml.safe_load((ROOT / 'CITATION.cff').read_text())['preferred-citation']
    assert cff['title'] in CITATION_BIBTEX and str(cff['year']) in CITATION_BIBTEX
    authors = ' and '.join(f"{a['family-names']}, {a['given-names']}" for a in cff['authors'])
    assert ' '.join(authors.split()) in ' '.join(CITATION_BIBTEX.split())


def test_stored_config_is_read_as_literals_only():
    cfg = read_config_text("a = dict(b=[1, -2.5, (3, 'x')], c=None)\ne = True\n")
    assert cfg == {'a': {'b': [1, -2.5, (3, 'x')], 'c': None}, 'e': True}
    with pytest.raises(ValueError, match='line 2'):  # refused whole, never half-read
        read_config_text("a = 1\nd = __import__('os').system('exit 3')\n")
    with pytest.raises(ValueError, match='not valid config text'):
        read_config_text('a = (')


# ---- round trip: export -> convert_checkpoint -> PeCoViT ---------------------------------------
@pytest.mark.parametrize('target', ['timm', 'hf'])
@pytest.mark.parametrize('name', ['classifier', 'mim', 'dense', 'probe_p14'])
@torch.no_grad()
def test_round_trip_is_bit_exact(name, target, tmp_path):
    src = Source(name)
    _, dst, _ = export(src, target, tmp_path)
    conv = convert_checkpoint(read_checkpoint(str(dst / 'model.safetensors')))
    assert conv.unrecognised == []
    # timm's Beit names a shared table as PeCoViT does: such a file reads as 'peco_mm'
    assert conv.fmt in (('hf_beit',) if target == 'hf' else ('timm_beit', 'peco_mm'))
    own = src.vit.state_dict()
    back = conv.state_dict
    lost = {'mask_token'} if target == 'timm' else set()
    assert set(own) - set(back) == lost & set(own)
    added = set(back) - set(own)
    assert added <= {'fc_norm.weight', 'fc_norm.bias'}  # identity pooling norm of 'dense'
    for k, v in own.items():
        if k in back:
            assert torch.equal(back[k], v), k
    rebuilt = PeCoViT(**TINY, **src.kwargs).eval()
    rebuilt.load_state_dict({k: v for k, v in back.items() if k not in added},
                            strict='mask_token' not in own or target == 'hf')
    if rebuilt.mask_token is not None and target == 'timm':
        rebuilt.mask_token.copy_(src.vit.mask_token)
    assert torch.equal(rebuilt.forward_features(src.images), src.tokens())


@torch.no_grad()
def test_mae_vit_round_trips_through_timm_vit(tmp_path):
    src = Source('mae_classifier')
    _, dst, _ = export(src, 'timm', tmp_path)
    conv = convert_checkpoint(read_checkpoint(str(dst / 'model.safetensors')))
    assert conv.fmt == 'timm_vit'
    own = src.vit.state_dict()
    assert set(conv.state_dict) == set(own)
    assert all(torch.equal(conv.state_dict[k], v) for k, v in own.items())
    # transformers' BEiT has no key bias: the export drops it and the outputs stay equal
    _, dst, _ = export(src, 'hf', tmp_path)
    conv = convert_checkpoint(read_checkpoint(str(dst / 'model.safetensors')))
    assert conv.kwargs['qkv_bias'] == 'qv'
    rebuilt = PeCoViT(**TINY, **dict(src.kwargs, qkv_bias='qv')).eval()
    rebuilt.load_state_dict(conv.state_dict)
    torch.testing.assert_close(rebuilt.forward_features(src.images), src.tokens(), atol=ATOL,
                               rtol=0)


# ---- the command line --------------------------------------------------------------------------
@pytest.mark.parametrize('target', ['timm', 'hf'])
@torch.no_grad()
def test_convert_tool_reads_an_export_folder_and_names_its_format(target, tmp_path):
    """tools/convert_checkpoint.py EXPORT_DIR reads its model.safetensors; timm's Beit with a
    shared table has PeCoViT's names exactly, and config.json says it is timm's."""
    from tests.conftest import load_tool
    tool = load_tool('convert_checkpoint')
    src = Source('mim')
    _, dst, _ = export(src, target, tmp_path)
    res = tool.convert_file(str(dst), str(tmp_path / 'back.pth'))
    assert res.fmt == ('timm_beit' if target == 'timm' else 'hf_beit') and res.ok
    assert tool.convert_file(str(dst / 'model.safetensors'), str(tmp_path / 'f.pth')).fmt == \
        res.fmt  # the file itself, its folder's config.json beside it
    back = read_checkpoint(str(tmp_path / 'back.pth'))['state_dict']
    own = {k: v for k, v in src.vit.state_dict().items() if k != 'mask_token' or target == 'hf'}
    assert set(back) == set(own) and all(torch.equal(back[k], v) for k, v in own.items())
    (tmp_path / 'empty').mkdir()
    with pytest.raises(FileNotFoundError, match='empty is a folder without model.safetensors'):
        tool.convert_file(str(tmp_path / 'empty'), str(tmp_path / 'x.pth'))


def test_cli_prints_the_loading_calls(tmp_path, capsys):
    """In process (tests/test_docs.py runs the README's commands as scripts)."""
    from tests.conftest import load_tool
    tool = load_tool('export_checkpoint')
    ckpt = Source('classifier').save(tmp_path / 'epoch_800.pth')
    out = {}
    for target in ('timm', 'hf'):
        assert tool.main([ckpt, str(tmp_path / target), '--to', target]) == 0
        out[target] = capsys.readouterr().out
    assert 'source: ' in out['timm'] and '(classifier)' in out['timm']
    assert f"load: timm.create_model('local-dir:{tmp_path / 'timm'}', pretrained=True)" \
        in out['timm']
    assert "pretrained_cfg_overlay=dict(file=" in out['timm']
    assert 'BeitForImageClassification.from_pretrained' in out['hf']
    assert sorted(p.name for p in (tmp_path / 'hf').iterdir()) == [
        'README.md', 'config.json', 'model.safetensors', 'preprocessor_config.json']
    assert tool.main([str(tmp_path / 'missing.pth'), str(tmp_path / 'x'), '--to', 'hf']) == 1
    assert 'missing.pth' in capsys.readouterr().err
    assert tool.main([ckpt, str(tmp_path / 'y'), '--to', 'hf', '--per-block-rel-pos']) == 1
    assert '--per-block-rel-pos is for --to timm' in capsys.readouterr().err
    # a file with pickled objects is refused, pointing to the converter, which reads them inertly
    pickled = tmp_path / 'pickled.pth'
    torch.save({'state_dict': read_checkpoint(ckpt)['state_dict'], 'args': argparse.Namespace()},
               pickled)
    assert tool.main([str(pickled), str(tmp_path / 'z'), '--to', 'hf']) == 1
    err = capsys.readouterr().err
    assert 'pickled Python objects' in err and 'convert it once with tools/convert_checkpoint' \
        in err and '--unsafe-pickle' not in err
    assert not (tmp_path / 'z').exists()
    with pytest.raises(SystemExit):  # no flag of its own
        tool.parse_args([ckpt, str(tmp_path / 'z'), '--to', 'hf', '--unsafe-pickle'])


@torch.no_grad()
def test_the_docs_mmpretrain_classifier_exports_with_its_head(tmp_path):
    """getting_started's mmpretrain snippet (its base config merged) at test size, saved in
    the names mmpretrain's VisionTransformerClsHead gives its classifier: the export keeps
    the head (found by default and with kind='classifier'), and timm's logits equal the
    run's."""
    from mmengine.config import Config

    from tests.test_docs import _tiny, config_snippets
    text = next(t for _, t in config_snippets() if "'mmpretrain::" in t)
    (tmp_path / 'cls.py').write_text(text)
    model = _tiny(Config.fromfile(str(tmp_path / 'cls.py')).model.to_dict())
    head_cfg = model['head']
    assert head_cfg['type'] == 'VisionTransformerClsHead' and head_cfg['hidden_dim'] is None
    kwargs = {k: v for k, v in model['backbone'].items() if k not in ('type', 'init_cfg')}
    vit = randomize(PeCoViT(**kwargs), 3)
    fc = nn.Linear(head_cfg['in_channels'], head_cfg['num_classes'])
    sd = {f'backbone.{k}': v for k, v in vit.state_dict().items()}
    sd.update({f'head.layers.head.{k}': v for k, v in fc.state_dict().items()})
    ckpt = {'state_dict': sd, 'meta': {'cfg': "model = dict(type='ImageClassifier')\n"}}
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(5))
    assert read_export_source(ckpt, 'cls.pth').kind == 'classifier'  # by default
    source = read_export_source(ckpt, 'cls.pth', kind='classifier')
    assert source.head['weight'].shape == (1000, 64)
    write_export(to_timm(source), str(tmp_path / 'timm'))
    exported = timm.create_model(f'local-dir:{tmp_path / "timm"}', pretrained=True).eval()
    torch.testing.assert_close(exported(x), fc(vit(x)[0]), atol=ATOL, rtol=0)
    # a head with a hidden layer (Linear, Tanh, Linear) has no place in BEiT's: said, not dropped
    sd = dict(sd, **{'head.layers.pre_logits.weight': torch.zeros(8, 64),
                     'head.layers.pre_logits.bias': torch.zeros(8)})
    with pytest.raises(ValueError, match='hidden layer .* --kind backbone'):
        read_export_source(dict(ckpt, state_dict=sd), 'cls.pth')
    assert read_export_source(dict(ckpt, state_dict=sd), 'cls.pth', kind='backbone').head == {}


def test_resizing_the_processor_cannot_follow_is_named():
    """A resize other than the short side's (mmseg's Resize, mmpretrain's Resize) is noted;
    the processor keeps the model's input size."""
    from peco_mm.tooling.export import read_preprocessing
    cfg = read_config_text("test_pipeline = [dict(type='mmseg.Resize', scale=(2048, 512)), "
                           "dict(type='CenterCrop', crop_size=48)]\n")
    data, notes = read_preprocessing(cfg, 64, 'run.pth')
    assert (data['resize'], data['crop']) == (64, (48, 48))
    assert notes == ['test_pipeline[0] Resize is not carried into the exported preprocessing '
                     '(the exported processor resizes the short side, then centre-crops)']


# stored config text a run could not have used, or that holds no usable preprocessing
BAD_STORED = {
    'std_zero': ('data_preprocessor = dict(mean=[0, 0, 0], std=[1, 0, 1])\n',
                 r'data_preprocessor\.std=\[1, 0, 1\] has a value at or below zero'),
    'mean_text': ("data_preprocessor = dict(mean='imagenet')\n",
                  r"data_preprocessor\.mean='imagenet', expected 3 numbers"),
    'scale_text': ("test_pipeline = [dict(type='ResizeEdge', scale='big', edge='short')]\n",
                   r"test_pipeline\[0\] ResizeEdge scale='big', expected a positive number"),
    'no_crop_size': ("test_pipeline = [dict(type='CenterCrop')]\n",
                     r'test_pipeline\[0\] CenterCrop crop_size=None'),
    'bare_name': ("test_pipeline = ['LoadImageFromFile']\n",
                  r"test_pipeline\[0\] is 'LoadImageFromFile', expected dict\(type="),
    'not_a_list': ('test_dataloader = dict(dataset=dict(pipeline=5))\n',
                   r'test_dataloader\.dataset\.pipeline is int, expected a list'),
}


@pytest.mark.parametrize('case', list(BAD_STORED))
def test_cli_refuses_unusable_stored_preprocessing_in_one_line(case, tmp_path, capsys):
    from tests.conftest import load_tool
    tool = load_tool('export_checkpoint')
    src = Source('classifier')
    text, message = BAD_STORED[case]
    src.ckpt['meta']['cfg'] += text
    ckpt = src.save(tmp_path / 'epoch_800.pth')
    assert tool.main([ckpt, str(tmp_path / 'out'), '--to', 'hf']) == 1
    err = capsys.readouterr().err
    assert re.search(r'epoch_800\.pth meta\.cfg: ' + message, err), err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / 'out').exists()


def test_kind_errors_name_the_problem(tmp_path):
    src = Source('dense')
    with pytest.raises(ValueError, match='holds a backbone, not a classifier'):
        read_export_source(src.ckpt, 'dense.pth', kind='classifier')
    mim = read_export_source(Source('mim').ckpt, 'mim.pth', kind='backbone')
    assert mim.kind == 'backbone' and mim.head == {}
    exp = to_hf(mim)
    assert exp.config['architectures'] == ['BeitModel']
    assert not any(k.startswith('lm_head') for k in exp.state_dict)


# ---- what an export takes from stored data: plain leaves, bounded --------------------------------
def shared_tree(depth: int):
    """A list of two references to one list of two references ... to 'a': `depth` levels,
    2**depth leaves when expanded, a few hundred bytes pickled (the pickle memo shares them)."""
    node = 'a'
    for _ in range(depth):
        node = [node, node]
    return node


STORED_LEAVES = {
    'classes_shared_tree': (('dataset_meta', 'classes'), [shared_tree(20)],
                            r'meta\.dataset_meta\.classes: expected a flat list of at most '
                            r'100000 class names, each a string of at most 256 characters; '
                            r'found item 0 is a list'),
    'classes_not_a_list': (('dataset_meta', 'classes'), shared_tree(20),
                           r'meta\.dataset_meta\.classes: .* found item 0 is a list'),
    'classes_long_name': (('dataset_meta', 'classes'), ('cat', 'x' * 100_000),
                          r'meta\.dataset_meta\.classes: .* found item 1 has 100000 characters'),
    'experiment_shared_tree': (('experiment_name',), shared_tree(20),
                               r'meta\.experiment_name: expected a string of at most 256 '
                               r'characters; found a list'),
    'epoch_shared_tree': (('epoch',), shared_tree(20),
                          r'meta\.epoch: expected an integer; found a list'),
}


@pytest.mark.parametrize('case', list(STORED_LEAVES))
def test_an_export_takes_only_plain_leaves_from_the_run(case, tmp_path):
    """Class names, the experiment name and the epoch are read as plain leaves: a structure
    shared many times (which str() would expand) is refused naming the key, before any text
    is made of it."""
    keys, value, message = STORED_LEAVES[case]
    src = Source('classifier')
    holder = src.ckpt['meta']
    for key in keys[:-1]:
        holder = holder.setdefault(key, {})
    holder[keys[-1]] = value
    with pytest.raises(ValueError, match=r'^run\.pth ' + message):
        read_export_source(src.ckpt, 'run.pth')


def test_cli_refuses_class_names_that_are_not_a_flat_list_in_one_line(tmp_path, capsys):
    from tests.conftest import load_tool
    src = Source('classifier')
    src.ckpt['meta']['dataset_meta'] = dict(classes=[shared_tree(16), 'cat'])
    ckpt = src.save(tmp_path / 'epoch_800.pth')
    assert load_tool('export_checkpoint').main([ckpt, str(tmp_path / 'out'), '--to', 'timm']) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / 'out').exists()
    assert re.search(r'epoch_800\.pth meta\.dataset_meta\.classes: expected a flat list .* '
                     r'found item 0 is a list; nothing was written', err), err


@pytest.mark.parametrize('where', ['file', 'under_a_file'])
def test_cli_export_into_a_file_is_one_line(where, tmp_path, capsys):
    """DST that is an existing file (or lies under one): one line naming it, the file kept."""
    from tests.conftest import load_tool
    ckpt = Source('classifier').save(tmp_path / 'epoch_800.pth')
    taken = tmp_path / 'taken'
    taken.write_text('mine\n')
    dst = taken if where == 'file' else taken / 'out'
    assert load_tool('export_checkpoint').main([ckpt, str(dst), '--to', 'timm']) == 1
    err = capsys.readouterr().err
    expected = (f'{dst} exists and is not a folder' if where == 'file'
                else f'{dst}: cannot create the export folder')
    assert len(err.strip().splitlines()) == 1 and expected in err, err
    assert taken.read_text() == 'mine\n'
