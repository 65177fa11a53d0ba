"""DESIGN §2: after custom_imports, peco_mm types resolve by plain name in every host scope,
also when a host builds them internally; a missing host is skipped without error."""
import subprocess
import sys

import pytest
from mmengine.registry import DefaultScope

import peco_mm  # noqa: F401
from tests.conftest import ROOT

TINY = dict(type='PeCoViT', embed_dims=64, num_layers=2, num_heads=4, img_size=32,
            patch_size=8)


@pytest.mark.parametrize('scope', ['mmpretrain', 'mmdet', 'mmseg'])
def test_plain_names_resolve_in_each_scope(scope):
    registry = __import__(f'{scope}.registry', fromlist=['MODELS'])
    with DefaultScope.overwrite_default_scope(scope):
        assert type(registry.MODELS.build(TINY)).__name__ == 'PeCoViT'
        assert registry.MODELS.get('ViTPyramidAdapter') is not None
        assert registry.OPTIM_WRAPPER_CONSTRUCTORS.get(
            'LayerDecayOptimWrapperConstructor') is not None


def test_host_builds_our_backbone_internally():
    """mmpretrain's ImageClassifier builds its backbone from a plain-name dict."""
    from mmpretrain.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        clf = MODELS.build(dict(type='ImageClassifier', backbone=dict(TINY, out_type='cls_token'),
                                head=dict(type='LinearClsHead', num_classes=3,
                                          in_channels=64)))
    assert type(clf.backbone).__name__ == 'PeCoViT'


def test_missing_host_is_skipped():
    """With mmdet unimportable, peco_mm still imports and the mmseg/mmpretrain parts work."""
    code = (
        'import sys\n'
        'class Block:\n'
        '    def find_spec(self, name, path=None, target=None):\n'
        "        if name == 'mmdet' or name.startswith('mmdet.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
        'sys.meta_path.insert(0, Block())\n'
        'import peco_mm\n'
        'from mmseg.registry import MODELS\n'
        "print(MODELS.get('PeCoViT').__name__)\n")
    out = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith('PeCoViT')
