"""Resuming another run's checkpoint says in one line what differs, before mmengine loads it
(instead of `The size of tensor a (32) must match the size of tensor b (64)` or `loaded state
dict has a different number of parameter groups`)."""
import pytest

from tests.conftest import ROOT
from tests.mim.conftest import write_config
from tests.reliability.test_nonfinite import peco_parts  # noqa: F401  (fixture)

TOKENIZER = str(ROOT / 'configs/demo/tokenizer_tiny_photos.py')


def tokenizer_opts(data, embed_dims, iters=1):
    return {'model.perceptual_weight': 0.0, 'model.perceptual': None,
            'model.quantizer.embed_dims': embed_dims,
            'train_dataloader.dataset.data_root': str(data), 'train_dataloader.batch_size': 4,
            'train_cfg.max_iters': iters, 'custom_hooks': [],
            'default_hooks.checkpoint.interval': 1, 'param_scheduler': []}


@pytest.fixture
def tok_data(tmp_path):
    from peco_mm.tooling.demo_data import make_class_folder
    make_class_folder(tmp_path / 'data' / 'train', size=64, per_class=2)
    return tmp_path / 'data'


def test_tokenizer_of_another_width(tmp_path, tok_data, isolated_mmengine):
    from peco_mm.supervisor.launch import run
    work = tmp_path / 'work'
    run(TOKENIZER, str(work), tokenizer_opts(tok_data, 32))
    with pytest.raises(ValueError) as err:  # same work dir, --resume, a 16-wide codebook
        run(TOKENIZER, str(work), tokenizer_opts(tok_data, 16, iters=2), resume='auto')
    msg = str(err.value)
    assert '\n' not in msg
    assert msg.startswith(f'--resume {work / "iter_1.pth"} was written by another run: '
                          'model.quantizer.embed_dims 32 in the checkpoint, 16 in this config; ')
    assert ('5 weights of another shape (e.g. encoder.conv_out.weight: (32, 64, 3, 3) in the '
            'checkpoint, (16, 64, 3, 3) in this model)') in msg


def test_pretraining_checkpoint_to_a_tokenizer_run(tmp_path, tok_data, peco_parts,  # noqa: F811
                                                   isolated_mmengine):
    from peco_mm.supervisor.launch import run
    data, tok = peco_parts
    cfg = write_config(tmp_path / 'peco.py', 'pretrain_vitb_in1k_300e.py', tok, str(data),
                       iters=1)
    run(cfg, str(tmp_path / 'peco'))
    ckpt = tmp_path / 'peco' / 'iter_1.pth'
    with pytest.raises(ValueError) as err:
        run(TOKENIZER, str(tmp_path / 'tok'), tokenizer_opts(tok_data, 32), resume=str(ckpt))
    msg = str(err.value)
    assert msg.startswith(f'--resume {ckpt} was written by another run: model.type PeCo in the '
                          'checkpoint, PeCoTokenizer in this config; ')
    assert "of this model's weights missing" in msg and '\n' not in msg


def test_same_run_resumes_quietly(tmp_path, tok_data, isolated_mmengine):
    from peco_mm.supervisor.launch import run
    work = tmp_path / 'work'
    run(TOKENIZER, str(work), tokenizer_opts(tok_data, 32))
    run(TOKENIZER, str(work), tokenizer_opts(tok_data, 32, iters=2), resume='auto')
    assert (work / 'iter_2.pth').is_file()
    log = sorted(work.glob('*/*.log'))[-1].read_text()
    assert 'was written by another run' not in log and 'resumed' in log.lower()


def test_a_self_sharing_stored_config_is_reported_in_a_bounded_line(tmp_path):
    """A stored model config that holds one list twice at every level (2**16 items written
    out) is compared and named in a short line. (Deeper sharing, 2**60 for a real attack, is
    refused by the read check: `tests/security/test_read_budget.py`.)"""
    import torch
    from mmengine.config import Config

    from peco_mm.checkpoint import read_checkpoint
    from peco_mm.engine.hooks.resume_check import compare_checkpoint
    shared: list = [0]
    for _ in range(16):
        shared = [shared, shared]
    torch.save({'meta': {'model_cfg': dict(type='PeCo', backbone=shared, neck=shared)}},
               tmp_path / 'shared.pth')
    ckpt = read_checkpoint(tmp_path / 'shared.pth')  # nested 17 levels: read
    cfg = Config(dict(model=dict(type='PeCo', backbone=dict(type='PeCoViT'), neck=[1, 2])))
    problems, fatal = compare_checkpoint(ckpt, cfg, None, 'shared.pth')
    assert not fatal and len(problems) == 3 and all(len(p) < 300 for p in problems), problems
    assert problems[0].startswith('model.backbone [[[[...], [...]], [[...], [...]]], ')
    assert problems[0].endswith("in the checkpoint, {'type': 'PeCoViT'} in this config")
