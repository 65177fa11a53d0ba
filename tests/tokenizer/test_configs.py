"""Every shipped tokenizer config parses, states the paper's settings, and builds its model."""
from pathlib import Path

import pytest
from mmengine.config import Config

from tests.conftest import ROOT

CONFIGS = sorted((ROOT / 'configs' / 'peco').glob('tokenizer_*.py'))


def test_paper_settings():
    cfg = Config.fromfile(ROOT / 'configs/peco/tokenizer_vqvae_in1k.py')
    opt = cfg.optim_wrapper.optimizer
    assert opt.type == 'Adam' and opt.lr == 5e-5 and tuple(opt.betas) == (0.5, 0.95)
    assert cfg.train_dataloader.batch_size * 8 == 128 and cfg.train_cfg.max_epochs == 100
    assert cfg.param_scheduler[0].end == 5000 and cfg.train_dataloader.dataset.type == 'ImageNet'
    m = cfg.model
    q = m.quantizer
    assert (q.num_embeddings, q.embed_dims, q.beta, m.perceptual_weight) == (8192, 256, 0.25, 1.0)
    assert tuple(m.perceptual.layers) == (3, 6, 9, 12) and m.perceptual.net == 'vit'


@pytest.mark.parametrize('path', CONFIGS, ids=lambda p: Path(p).stem)
def test_config_builds(path):
    from mmengine.registry import MODELS
    import peco_mm  # noqa: F401
    cfg = Config.fromfile(path)
    model_cfg = cfg.model.copy()
    # the frozen perceptual network needs its checkpoint; the rest builds as shipped
    model_cfg.update(perceptual_weight=0.0, with_decoder=path.stem != 'tokenizer_vit_in1k')
    model = MODELS.build(model_cfg)
    assert model.num_embeddings == 8192
    assert model.downsample == (8 if '8x' in path.stem else 16)
    if 'lite' in path.stem:
        assert round(model.num_params()['tokenizer'] / 1e6, 1) == 25.7


def test_table6_codeword_loss_configs():
    """The explicit alternatives replace the perceptual loss (lambda = 0)."""
    for name, kind in (('cls', 'classification'), ('contrastive', 'contrastive')):
        m = Config.fromfile(ROOT / f'configs/peco/tokenizer_vqvae_{name}_in1k.py').model
        assert (m.perceptual_weight, m.codeword_loss, m.codeword_loss_weight) == (0.0, kind, 1.0)
    m = Config.fromfile(ROOT / 'configs/peco/tokenizer_vqvae_cls_in1k.py').model
    assert m.codeword_loss_cfg.num_classes == 1000


def test_perceptual_network_configs():
    """The tokenizers default to the MoCo v3 ViT-B that exists (300 epochs, released); the
    paper's 100-epoch one is mmpretrain's MoCo v3 ViT-B recipe cut to 100 epochs."""
    tok = Config.fromfile(ROOT / 'configs/peco/tokenizer_vqvae_in1k.py')
    assert tok.model.perceptual.checkpoint == 'checkpoints/mocov3_vit_base_300ep.pth'
    assert tok.test_evaluator.perceptual.checkpoint == tok.model.perceptual.checkpoint
    cfg = Config.fromfile(ROOT / 'configs/peco/mocov3_vitb_100e_in1k.py')
    assert cfg.model.type == 'MoCoV3' and cfg.model.backbone.arch == 'base'
    assert cfg.train_cfg.max_epochs == 100
    warmup, cosine = cfg.param_scheduler
    assert (warmup.begin, warmup.end, cosine.begin, cosine.end) == (0, 10, 10, 100)
    assert cosine.T_max == 90 and cfg.optim_wrapper.optimizer.lr == 2.4e-3
    assert cfg.train_dataloader.batch_size * 16 == cfg.auto_scale_lr.base_batch_size == 4096
