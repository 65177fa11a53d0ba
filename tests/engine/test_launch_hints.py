"""The launcher's missing-checkpoint errors suggest only settings the model then accepts."""
import pytest
from mmengine.config import Config

from peco_mm.supervisor.launch import check_pretrained_paths


def _cfg(part: str) -> Config:
    return Config(dict(model={part: dict(type='PeCoViT', init_cfg=dict(
        type='Pretrained', checkpoint='no/such/file.pth'))}))


def test_missing_tokenizer_hint_does_not_offer_random_targets():
    # PeCo refuses a target generator without weights, so `init_cfg=None` must not be offered
    with pytest.raises(FileNotFoundError) as e:
        check_pretrained_paths(_cfg('target_generator'))
    msg = str(e.value)
    assert 'model.target_generator.init_cfg.checkpoint=PATH' in msg
    assert 'init_cfg=None' not in msg and 'from scratch' not in msg


def test_missing_backbone_hint_offers_training_from_scratch():
    with pytest.raises(FileNotFoundError) as e:
        check_pretrained_paths(_cfg('backbone'))
    msg = str(e.value)
    assert 'model.backbone.init_cfg.checkpoint=PATH' in msg
    assert 'model.backbone.init_cfg=None to train from scratch' in msg
