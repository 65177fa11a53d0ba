"""Checkpoint conversion: every source format round-trips into PeCoViT with equal features.

Source models are tiny (width 64, depth 2, 4 heads, 32 px, patch 8) with random weights; each
state dict is wrapped into its format's file layout, converted, loaded strictly into PeCoViT,
and the features are compared with the source model's (eval mode, atol 1e-5).
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from peco_mm.checkpoint import (FORMATS, convert_checkpoint, convert_state_dict, detect_format,
                                read_checkpoint)
from peco_mm.models.vit import PeCoViT
from tests.conftest import randomize

timm_vit = pytest.importorskip('timm.models.vision_transformer')
timm_beit = pytest.importorskip('timm.models.beit')

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4)
MM_ARCH = dict(embed_dims=64, num_layers=2, num_heads=4, feedforward_channels=256)
ATOL = 1e-5


def images(size: int = 32, seed: int = 0) -> torch.Tensor:
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(seed))


def timm_tokens(model):
    return lambda x: model.forward_features(x)  # (B, 1+N, C) after the final norm


def timm_pooled(model):
    return lambda x: model.forward_head(model.forward_features(x), pre_logits=True)


# ---- one source per format: (checkpoint as torch.load returns it, reference functions) --------
def src_timm_vit():
    m = randomize(timm_vit.VisionTransformer(**TINY, init_values=0.1, num_classes=5), 1)
    return m.state_dict(), timm_tokens(m), timm_pooled(m)


def src_timm_beit():  # per-block tables + absolute positions, avg pooling with fc_norm
    m = randomize(timm_beit.Beit(**TINY, init_values=0.1, use_abs_pos_emb=True,
                                 use_rel_pos_bias=True, num_classes=5), 2)
    return m.state_dict(), timm_tokens(m), timm_pooled(m)


def src_unilm_beit():  # BEiT / PeCo pretraining file: shared table, lm_head, mask token
    m = randomize(timm_beit.Beit(**TINY, init_values=0.1, use_abs_pos_emb=False,
                                 use_shared_rel_pos_bias=True, global_pool='token',
                                 num_classes=0), 3)
    sd = m.state_dict()
    sd['mask_token'] = torch.randn(1, 1, 64)
    sd['lm_head.weight'] = torch.randn(32, 64)
    sd['lm_head.bias'] = torch.randn(32)
    sd['rel_pos_bias.relative_position_index'] = torch.zeros(17, 17, dtype=torch.long)
    for i in range(2):
        sd[f'blocks.{i}.attn.relative_position_index'] = torch.zeros(17, 17, dtype=torch.long)
    return {'model': sd}, timm_tokens(m), timm_pooled(m)


def src_mae():  # pretraining file: encoder + decoder + the decoder's mask token
    m = randomize(timm_vit.VisionTransformer(**TINY, global_pool='token', num_classes=0), 4)
    sd = m.state_dict()
    sd.update({'mask_token': torch.randn(1, 1, 32), 'decoder_embed.weight': torch.randn(32, 64),
               'decoder_pos_embed': torch.randn(1, 17, 32),
               'decoder_blocks.0.attn.qkv.weight': torch.randn(96, 32),
               'decoder_norm.weight': torch.randn(32), 'decoder_pred.weight': torch.randn(192, 32)})
    return {'model': sd, 'epoch': 3}, timm_tokens(m), timm_pooled(m)


def src_mocov3():
    base = randomize(timm_vit.VisionTransformer(**TINY, num_classes=0), 5)
    momentum = randomize(timm_vit.VisionTransformer(**TINY, num_classes=0), 6)
    sd = {f'module.base_encoder.{k}': v for k, v in base.state_dict().items()}
    sd.update({f'module.momentum_encoder.{k}': v for k, v in momentum.state_dict().items()})
    sd['module.base_encoder.head.0.weight'] = torch.randn(128, 64)  # projector
    sd['module.predictor.0.weight'] = torch.randn(128, 128)
    return {'state_dict': sd, 'epoch': 1, 'arch': 'vit_tiny'}, timm_tokens(base), \
        timm_pooled(base)


def src_dino():  # training checkpoint: the teacher must win over the student
    teacher = randomize(timm_vit.VisionTransformer(**TINY, num_classes=0), 7)
    student = randomize(timm_vit.VisionTransformer(**TINY, num_classes=0), 8)
    ckpt = {'teacher': {f'backbone.{k}': v for k, v in teacher.state_dict().items()},
            'student': {f'module.backbone.{k}': v for k, v in student.state_dict().items()},
            'epoch': 2}
    ckpt['teacher']['head.last_layer.weight_g'] = torch.randn(100, 1)
    ckpt['student']['module.head.mlp.0.weight'] = torch.randn(32, 64)
    return ckpt, timm_tokens(teacher), timm_pooled(teacher)


def src_mmpretrain():  # VisionTransformer with LayerScale inside attn / ffn
    from mmpretrain.models.backbones import VisionTransformer
    m = randomize(VisionTransformer(arch=MM_ARCH, img_size=32, patch_size=8,
                                    layer_scale_init_value=0.1, out_type='raw'), 9)
    sd = {f'backbone.{k}': v for k, v in m.state_dict().items()}
    sd['head.fc.weight'] = torch.randn(5, 64)
    return {'state_dict': sd, 'meta': {'epoch': 1}}, (lambda x: m(x)[0]), \
        (lambda x: m(x)[0][:, 0])


def src_mmpretrain_beit():  # BEiTViT: q/v bias, per-block tables, avg pooling with ln2
    from mmpretrain.models.backbones import BEiTViT
    m = randomize(BEiTViT(arch=MM_ARCH, img_size=32, patch_size=8, layer_scale_init_value=0.1,
                          use_abs_pos_emb=False, use_rel_pos_bias=True,
                          use_shared_rel_pos_bias=False, out_type='avg_featmap'), 10)
    sd = {f'backbone.{k}': v for k, v in m.state_dict().items()}
    return {'state_dict': sd}, None, (lambda x: m(x)[0])


def src_peco_mm():  # our own mmengine checkpoint of a classifier
    m = randomize(PeCoViT(arch='test', img_size=32,
                          patch_size=8, qkv_bias='qv', rel_pos_bias='per_block',
                          layer_scale_init_value=0.1, use_mask_token=True), 11)
    sd = {f'backbone.{k}': v for k, v in m.state_dict().items()}
    sd['head.fc.weight'] = torch.randn(5, 64)
    sd['target_generator.quantizer.embed'] = torch.randn(16, 8)
    return {'state_dict': sd, 'meta': {}}, m.forward_features, (lambda x: m(x)[0])


def src_hf_beit():  # transformers BeitForImageClassification: per-block tables, mean pooling
    transformers = pytest.importorskip('transformers')
    config = transformers.BeitConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
        image_size=32, patch_size=8, layer_norm_eps=1e-6, use_relative_position_bias=True,
        use_mean_pooling=True, layer_scale_init_value=0.1, num_labels=5)
    m = randomize(transformers.BeitForImageClassification(config), 13)
    return m.state_dict(), (lambda x: m.beit(x).last_hidden_state), \
        (lambda x: m.beit(x).pooler_output)


SOURCES = {  # case -> (builder, detected format, heads recorded by the weights)
    'timm_vit': (src_timm_vit, 'timm_vit', False),
    'timm_beit': (src_timm_beit, 'timm_beit', True),
    'unilm_beit': (src_unilm_beit, 'unilm_beit', True),
    'mae': (src_mae, 'mae', False),
    'mocov3': (src_mocov3, 'mocov3', False),
    'dino': (src_dino, 'dino', False),
    'mmpretrain_vit': (src_mmpretrain, 'mmpretrain', False),
    'mmpretrain_beit': (src_mmpretrain_beit, 'mmpretrain', True),
    'peco_mm': (src_peco_mm, 'peco_mm', True),
    'hf_beit': (src_hf_beit, 'hf_beit', True),
}


def build_converted(ckpt, heads_known: bool, **convert_kwargs) -> tuple[PeCoViT, dict]:
    sd, kwargs = convert_state_dict(ckpt, **convert_kwargs)
    if not heads_known:
        assert kwargs['arch']['num_heads'] == 1  # the documented guess: 64 // 64
        kwargs['arch']['num_heads'] = 4
    model = PeCoViT(**kwargs).eval()
    model.load_state_dict(sd, strict=True)
    return model, kwargs


@pytest.mark.parametrize('case', list(SOURCES))
@torch.no_grad()
def test_format_round_trip(case):
    builder, fmt, heads_known = SOURCES[case]
    ckpt, ref_tokens, ref_pooled = builder()
    assert detect_format(ckpt) == fmt
    model, kwargs = build_converted(ckpt, heads_known)
    assert kwargs['arch']['embed_dims'] == 64 and kwargs['arch']['num_layers'] == 2
    assert kwargs['arch']['mlp_ratio'] == 4.0 and kwargs['patch_size'] == 8
    assert kwargs['img_size'] == 32
    x = images()
    if ref_tokens is not None:
        expected = ref_tokens(x)
        assert expected.shape == (2, 17, 64) and expected.std() > 0.1
        torch.testing.assert_close(model.forward_features(x), expected, atol=ATOL, rtol=0)
    expected = ref_pooled(x)
    assert expected.shape == (2, 64) and expected.std() > 0.1
    torch.testing.assert_close(model(x)[0], expected, atol=ATOL, rtol=0)


def test_inferred_arguments_and_report():
    ckpt, _, _ = src_unilm_beit()
    conv = convert_checkpoint(ckpt)
    assert conv.fmt == 'unilm_beit' and conv.source == "ckpt['model']"
    assert conv.kwargs == dict(
        arch=dict(embed_dims=64, num_layers=2, num_heads=4, mlp_ratio=4.0), img_size=32,
        patch_size=8, qkv_bias='qv', use_abs_pos_emb=False, rel_pos_bias='shared',
        layer_scale_init_value=0.1, final_norm=True, use_mask_token=True)
    assert set(conv.dropped) == {'lm_head.weight', 'lm_head.bias',
                                 'rel_pos_bias.relative_position_index',
                                 'blocks.0.attn.relative_position_index',
                                 'blocks.1.attn.relative_position_index'}
    assert conv.unrecognised == []
    torch.testing.assert_close(conv.state_dict['mask_token'], ckpt['model']['mask_token'])

    mae = convert_checkpoint(src_mae()[0])
    assert {'mask_token', 'decoder_embed.weight', 'decoder_pred.weight'} <= set(mae.dropped)
    assert mae.kwargs['qkv_bias'] == 'qkv' and 'use_mask_token' not in mae.kwargs
    assert any('num_heads=1 is a guess' in n for n in mae.notes)

    dino = convert_checkpoint(src_dino()[0])
    assert 'head.last_layer.weight_g' in dino.dropped
    assert 'student.module.backbone.cls_token' in dino.dropped

    beit = convert_checkpoint(src_timm_beit()[0])
    assert beit.kwargs['rel_pos_bias'] == 'per_block' and beit.kwargs['final_norm'] is False
    assert beit.kwargs['out_type'] == 'avg_featmap' and 'head.weight' in beit.dropped


def test_pecovit_names_are_detected_as_peco_mm(monkeypatch):
    """PeCoViT-named tensors are 'peco_mm' bare, under 'backbone.', or in {'state_dict': ..}
    (what tools/convert_checkpoint.py writes), even when the names also fit timm BEiT."""
    m = PeCoViT(arch='test', img_size=32,
                patch_size=8, qkv_bias='qv', rel_pos_bias='shared', layer_scale_init_value=0.1)
    sd = m.state_dict()
    assert detect_format(sd) == 'peco_mm'
    assert detect_format({'state_dict': sd, 'meta': {'format': 'unilm_beit'}}) == 'peco_mm'
    assert detect_format({'state_dict': {f'backbone.{k}': v for k, v in sd.items()}}) == 'peco_mm'
    out, kwargs = convert_state_dict({'state_dict': sd})
    assert out.keys() == sd.keys() and kwargs['rel_pos_bias'] == 'shared'
    assert all(torch.equal(out[k], sd[k]) for k in sd)
    # foreign names keep their own format; a timm table without a cls slot is not PeCoViT's
    assert detect_format(src_timm_vit()[0]) == 'timm_vit'
    no_cls = randomize(timm_vit.VisionTransformer(**TINY, no_embed_class=True, num_classes=0), 0)
    assert detect_format(no_cls.state_dict()) == 'timm_vit'
    # both functions are pure: the caller (the CLI, load_pretrained) does the reporting

    def no_output(*args, **kwargs):
        raise AssertionError(f'convert_state_dict printed {args}')

    monkeypatch.setattr('builtins.print', no_output)
    monkeypatch.setattr('mmengine.logging.print_log', no_output)
    ckpt = src_dino()[0]
    assert detect_format(ckpt) == 'dino'
    convert_state_dict(ckpt)


def test_unknown_format_lists_keys():
    with pytest.raises(ValueError, match=r"top-level keys \['weights', 'epoch'\]") as err:
        detect_format({'weights': {'encoder.conv.weight': torch.zeros(1)}, 'epoch': 3})
    assert 'encoder.conv.weight' not in str(err.value)  # not a wrapper we know
    with pytest.raises(ValueError, match=r"sample keys of ckpt\['state_dict'\]: "
                       r"\['encoder.conv.weight'\]"):
        convert_state_dict({'state_dict': {'encoder.conv.weight': torch.zeros(1)}})
    with pytest.raises(ValueError, match='allowed'):
        convert_state_dict(src_timm_vit()[0], fmt='deit')
    sd = src_timm_vit()[0]
    sd['norm_pre.weight'] = torch.ones(64)  # a CLIP-style layer PeCoViT does not have
    with pytest.raises(ValueError, match=r"cannot map these keys to PeCoViT: \['norm_pre"):
        convert_state_dict(sd)


@torch.no_grad()
def test_shared_table_expands_per_block():
    ckpt, ref_tokens, _ = src_unilm_beit()
    model, kwargs = build_converted(ckpt, True, per_block_rel_pos=True)
    assert kwargs['rel_pos_bias'] == 'per_block' and model.rel_pos_bias is None
    table = ckpt['model']['rel_pos_bias.relative_position_bias_table']
    for blk in model.blocks:
        torch.testing.assert_close(blk.rel_pos_bias.relative_position_bias_table, table,
                                   atol=0, rtol=0)
    x = images()
    torch.testing.assert_close(model.forward_features(x), ref_tokens(x), atol=ATOL, rtol=0)


@torch.no_grad()
def test_resize_to_another_img_size():
    ckpt, _, _ = src_timm_beit()  # absolute and per-block relative tables
    sd, kwargs = convert_state_dict(ckpt, img_size=48)
    assert kwargs['img_size'] == 48
    assert sd['pos_embed'].shape == (1, 1 + 6 * 6, 64)
    for i in range(2):
        table = sd[f'blocks.{i}.rel_pos_bias.relative_position_bias_table']
        assert table.shape == (11 * 11 + 3, 4)
    resized = PeCoViT(**kwargs).eval()
    resized.load_state_dict(sd, strict=True)
    # the same weights kept at 32 px and resized on the fly give the same 48 px features
    native, _ = build_converted(ckpt, True)
    x = images(48)
    torch.testing.assert_close(resized(x)[0], native(x)[0], atol=ATOL, rtol=0)
    # the 3 cls rows survive the resize untouched; the patch offsets are interpolated
    src_table = ckpt['blocks.0.attn.relative_position_bias_table']
    dst_table = sd['blocks.0.rel_pos_bias.relative_position_bias_table']
    torch.testing.assert_close(dst_table[-3:], src_table[-3:], atol=0, rtol=0)
    with pytest.raises(ValueError, match='not divisible by the patch size 8'):
        convert_state_dict(ckpt, img_size=36)


@torch.no_grad()
def test_no_embed_class_pos_embed():
    m = randomize(timm_vit.VisionTransformer(**TINY, no_embed_class=True, num_classes=0), 12)
    model, _ = build_converted(m.state_dict(), False)
    x = images()
    torch.testing.assert_close(model.forward_features(x), m.forward_features(x), atol=ATOL,
                               rtol=0)


def _run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / 'tools' / 'convert_checkpoint.py'), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def _cli_module():
    spec = importlib.util.spec_from_file_location('convert_checkpoint_cli',
                                                  ROOT / 'tools' / 'convert_checkpoint.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@torch.no_grad()
def test_cli_round_trip_and_pretrained_init(tmp_path, capsys):
    ckpt, ref_tokens, _ = src_unilm_beit()
    ckpt['args'] = argparse.Namespace(lr=1e-3)  # training files pickle their arguments
    src, dst = tmp_path / 'beit.pth', tmp_path / 'out' / 'peco.pth'
    torch.save(ckpt, src)
    with pytest.raises(ValueError, match='holds pickled Python objects .*argparse.Namespace'):
        read_checkpoint(str(src))  # the gate refuses it; the converter reads it inertly

    _cli_module().parse_args([str(src), str(dst), '--unsafe-pickle'])  # an old flag: a note
    assert '--unsafe-pickle is no longer needed or used' in capsys.readouterr().err

    # run as a script from a folder outside the repository
    done = _run_cli(str(src), str(dst), '--per-block-rel-pos', cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert 'argparse.Namespace read as inert stand-ins' in out and 'unilm_beit' in out
    assert 'dropped keys (not part of the backbone): 5' in out and 'lm_head.weight' in out
    assert 'missing keys (PeCoViT parameters the file does not provide): 0' in out
    assert 'unexpected keys (in the file, not in PeCoViT): 0' in out
    assert "rel_pos_bias='per_block'" in out

    saved = torch.load(dst, weights_only=True)
    assert set(saved) == {'state_dict', 'meta'} and saved['meta']['format'] == 'unilm_beit'
    args = saved['meta']['pecovit_args']
    printed = next(line for line in out.splitlines() if line.startswith('PeCoViT arguments: '))
    assert eval(f"dict({printed[len('PeCoViT arguments: '):]})") == args  # noqa: S307
    model = PeCoViT(**args, init_cfg=dict(type='Pretrained', checkpoint=str(dst)))
    model.init_weights()
    model.eval()
    x = images()
    torch.testing.assert_close(model.forward_features(x), ref_tokens(x), atol=ATOL, rtol=0)


def test_from_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match='nowhere.pth'):
        PeCoViT.from_checkpoint(str(tmp_path / 'nowhere.pth'))
    ckpt, ref_tokens, _ = src_mocov3()
    path = tmp_path / 'moco.pth'
    torch.save(ckpt, path)
    model = PeCoViT.from_checkpoint(str(path), num_heads=4)
    model.eval()
    x = images()
    with torch.no_grad():
        outs = model.forward_intermediates(x, (0, 1), norm=True, output_fmt='NLC')
        torch.testing.assert_close(outs[1], ref_tokens(x), atol=ATOL, rtol=0)
    assert len(outs) == 2 and outs[0].shape == (2, 17, 64)
    torch.save({'weights': {'a': torch.zeros(1)}}, tmp_path / 'odd.pth')
    with pytest.raises(ValueError, match="top-level keys \\['weights'\\]"):
        PeCoViT.from_checkpoint(str(tmp_path / 'odd.pth'))


def test_every_format_is_tested():
    assert {fmt for _, fmt, _ in SOURCES.values()} == set(FORMATS)


@torch.no_grad()
def test_safetensors_timm_file(tmp_path):
    safetensors = pytest.importorskip('safetensors.torch')
    sd, ref_tokens, _ = src_timm_vit()
    path = tmp_path / 'model.safetensors'  # how timm / the HF hub ship weights today
    safetensors.save_file({k: v.contiguous() for k, v in sd.items()}, str(path))
    model = PeCoViT.from_checkpoint(str(path), num_heads=4).eval()
    x = images()
    torch.testing.assert_close(model.forward_features(x), ref_tokens(x), atol=ATOL, rtol=0)


def test_cli_summarises_a_long_key_list_by_group_and_lists_it_with_verbose(tmp_path, capsys):
    """An MAE pretraining file with its whole decoder: 32 dropped keys, shown as a count and
    one line per group of names with the reason their keys share; --verbose lists each key."""
    enc = randomize(timm_vit.VisionTransformer(**TINY, global_pool='token', num_classes=0), 4)
    dec = timm_vit.VisionTransformer(**dict(TINY, embed_dim=32), num_classes=0)
    sd = enc.state_dict()
    sd.update({f'decoder_{k}': v for k, v in dec.state_dict().items() if k.startswith('blocks.')})
    sd.update({'mask_token': torch.randn(1, 1, 32), 'decoder_pos_embed': torch.randn(1, 17, 32)})
    sd.update({f'decoder_{part}.{p}': torch.randn(8) for part in ('embed', 'norm', 'pred')
               for p in ('weight', 'bias')})
    torch.save({'model': sd, 'epoch': 3}, tmp_path / 'mae.pth')
    cli = _cli_module()
    assert cli.main([str(tmp_path / 'mae.pth'), str(tmp_path / 'a.pth')]) == 0
    out = capsys.readouterr().out
    block = out.split('dropped keys (not part of the backbone): 32\n', 1)[1].split('\nunrec')[0]
    assert block.splitlines() == [
        '  decoder_blocks.* (24)  (MAE decoder)', '  decoder_embed.* (2)  (MAE decoder)',
        '  decoder_norm.* (2)  (MAE decoder)', '  decoder_pos_embed  (MAE decoder)',
        '  decoder_pred.* (2)  (MAE decoder)', '  mask_token  (MAE decoder mask token)',
        '  (--verbose lists every key)']
    assert cli.main([str(tmp_path / 'mae.pth'), str(tmp_path / 'b.pth'), '--verbose']) == 0
    out = capsys.readouterr().out
    block = out.split('dropped keys (not part of the backbone): 32\n', 1)[1].split('\nunrec')[0]
    assert len(block.splitlines()) == 32
    assert '  decoder_blocks.1.mlp.fc2.bias  (MAE decoder)' in block.splitlines()
