"""After custom_imports, peco_mm types resolve by plain name in every host scope, also when a
host builds them internally; a missing host is skipped without error; `import peco_mm` is
light (no host package imported, nothing in mmengine patched)."""
import subprocess
import sys

import pytest
from mmengine.registry import DefaultScope

import peco_mm  # noqa: F401
from tests.conftest import ROOT

TINY = dict(type='PeCoViT', arch='test', img_size=32, patch_size=8)


def run_python(code: str) -> str:
    """stdout of `code` in a fresh interpreter (the repository as working directory)."""
    out = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


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
    assert run_python(code).strip().endswith('PeCoViT')


def test_import_is_light_and_patches_nothing():
    """`import peco_mm` imports no host package and leaves mmengine's HistoryBuffer alone; the
    host modules are imported when one of their types is first built."""
    code = (
        'import sys, inspect\n'
        'from mmengine.logging import HistoryBuffer\n'
        'before = HistoryBuffer.__dict__["__getstate__"]\n'
        'import peco_mm\n'
        'hosts = sorted(h for h in ("mmpretrain", "mmdet", "mmseg", "timm", "torchvision")\n'
        '               if h in sys.modules)\n'
        'print("hosts", hosts)\n'
        'print("patched", HistoryBuffer.__dict__["__getstate__"] is not before)\n'
        'from mmengine.registry import MODELS\n'
        'print("lazy", inspect.isclass(MODELS.get("PeCoMAEDecoder")))\n'
        'dec = MODELS.build(dict(type="PeCoMAEDecoder", grid=2, in_channels=8, embed_dims=8,\n'
        '                        num_layers=1, num_heads=2))\n'
        'print("built", type(dec).__name__, inspect.isclass(MODELS.get("PeCoMAEDecoder")),\n'
        '      inspect.isclass(MODELS.get("PeCoMAE")), "mmpretrain" in sys.modules)\n')
    assert run_python(code).splitlines() == [
        'hosts []', 'patched False', 'lazy False', 'built PeCoMAEDecoder True True True']


def test_checkpoints_of_our_launcher_store_history_buffers_as_plain_data(tmp_path):
    """The checkpoint hook stores the message hub's HistoryBuffers as plain dicts (tensors of
    the buffers' own dtype) in the checkpoint's copy: torch's weights-only loader reads the
    file with no allow-list, and the buffers come back with the same values, bit for bit;
    HistoryBuffer and the runner's buffers are left alone."""
    import numpy as np
    import torch
    from mmengine.logging import HistoryBuffer, MessageHub

    from peco_mm.checkpoint.plain import history_buffers_restored, plain_checkpoint
    original = dict(HistoryBuffer.__dict__)
    hub = MessageHub('test_plain_message_hub')
    for value in (1.0, 3.0, 0.1 + 0.2):
        hub.update_scalar('train/loss', value)
    hub.update_scalar('train/count', 7, count=3)
    hub.update_info('eta', np.float64(12.25))  # mmengine stores numpy scalars too
    torch.save(plain_checkpoint({'message_hub': hub.state_dict()}), tmp_path / 'a.pth')
    assert dict(HistoryBuffer.__dict__) == original
    assert type(hub.get_scalar('train/loss')) is HistoryBuffer  # the runner's own: untouched
    loaded = torch.load(tmp_path / 'a.pth', weights_only=True)['message_hub']
    assert loaded['runtime_info']['eta'] == 12.25 and type(loaded['runtime_info']['eta']) is float
    assert set(loaded['log_scalars']['train/loss']) == {'log_history', 'count_history',
                                                        'max_length'}
    assert history_buffers_restored(loaded) == 2
    for key in ('train/loss', 'train/count'):
        buf, orig = loaded['log_scalars'][key], hub.get_scalar(key)
        assert type(buf) is HistoryBuffer and buf.max_length == orig.max_length
        for got, want in zip(buf.data, orig.data):
            assert got.dtype == want.dtype and np.array_equal(got, want)
    assert loaded['log_scalars']['train/loss'].mean() == hub.get_scalar('train/loss').mean()
    assert loaded['log_scalars']['train/count'].mean() == 7 / 3


def test_a_transformers_that_breaks_mmpretrain_is_named(monkeypatch):
    # mmpretrain 1.2's import fails with an unhelpful TypeError next to transformers >= 4.52
    import importlib.metadata as md

    from peco_mm import registry
    installed = {'mmpretrain': '1.2.0', 'transformers': '5.17.0'}

    def version(name):
        if name not in installed:
            raise md.PackageNotFoundError(name)
        return installed[name]
    monkeypatch.setattr(md, 'version', version)
    (problem, ) = registry.host_stack_problems()
    assert 'transformers 5.17.0' in problem and 'transformers<4.52' in problem
    for ok in ('4.51.3', '4.45.0', '3.0.0'):
        installed['transformers'] = ok
        assert registry.host_stack_problems() == []
    installed['transformers'] = '4.52.0rc1'
    assert len(registry.host_stack_problems()) == 1
    del installed['transformers']
    assert registry.host_stack_problems() == []
    # the installed stack of this repository has none
    monkeypatch.undo()
    assert registry.host_stack_problems() == []
