"""A stock mmseg config needs only the backbone swap: its `model.pretrained` reaches PeCoViT
(EncoderDecoder passes it as `pretrained=`), which loads it as mmseg's own ViT does."""
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

import peco_mm  # noqa: F401
from peco_mm.models import PeCoViT

ARCH = dict(embed_dims=32, num_layers=4, num_heads=2)

STOCK_UPERNET_VIT = """
_base_ = 'mmseg::_base_/models/upernet_vit-b16_ln_mln.py'
model = dict(
    pretrained='{ckpt}',
    backbone=dict(_delete_=True, type='PeCoViT', arch={arch}, img_size=64, patch_size=16,
                  out_type='featmap', out_indices=(0, 1, 2, 3)),
    neck=dict(in_channels=[32] * 4, out_channels=32),
    decode_head=dict(in_channels=[32] * 4, channels=16),
    auxiliary_head=dict(in_channels=32, channels=16))
"""


def test_stock_mmseg_config_pretrained_loads(tmp_path):
    torch.manual_seed(0)
    src = PeCoViT(arch=ARCH, img_size=64, patch_size=16)
    for p in src.parameters():
        torch.nn.init.normal_(p)
    torch.save({'state_dict': src.state_dict()}, tmp_path / 'tiny.pth')
    cfg_file = tmp_path / 'cfg.py'
    cfg_file.write_text(STOCK_UPERNET_VIT.format(ckpt=tmp_path / 'tiny.pth', arch=ARCH))
    cfg = Config.fromfile(cfg_file)
    assert cfg.model.pretrained == str(tmp_path / 'tiny.pth')  # the stock key, untouched
    init_default_scope('mmseg')
    from mmengine.registry import MODELS
    model = MODELS.build(cfg.model)
    assert model.backbone.init_cfg == dict(type='Pretrained', checkpoint=str(tmp_path / 'tiny.pth'))
    model.init_weights()
    torch.testing.assert_close(model.backbone.blocks[1].mlp.fc1.weight,
                               src.blocks[1].mlp.fc1.weight, atol=0, rtol=0)
    torch.testing.assert_close(model.backbone.cls_token, src.cls_token, atol=0, rtol=0)


def test_pretrained_and_init_cfg_together_is_an_error():
    with pytest.raises(ValueError, match='pretrained.*init_cfg'):
        PeCoViT(arch=ARCH, img_size=32, pretrained='a.pth',
                init_cfg=dict(type='Pretrained', checkpoint='b.pth'))
    with pytest.raises(TypeError, match='pretrained'):
        PeCoViT(arch=ARCH, img_size=32, pretrained=3)
