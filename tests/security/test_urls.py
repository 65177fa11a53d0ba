"""Every URL is read weights-only: http(s):// checkpoints (load_from, resume, init_cfg
Pretrained, torchvision:// names, a tokenizer) are downloaded once into torch hub's cache and
read by the same gate as local files. No network: the server is a stand-in for urlopen, and
the hostile files are placed in the cache as a finished download would leave them."""
import email.message
import hashlib
import io
import os
import shutil

import pytest
import torch

from peco_mm.checkpoint.budget import BUDGET_ENV
from tests.security.hostile import (BUDGET_MB, EXPECTED, NAME_EXPECTED, TRACE_MODULE, build_corpus,
                                    build_name_corpus)
from tests.security.test_hostile_files import TINY_VIT, check_refused

BASE = 'https://example.org/weights/'


class Response(io.BytesIO):
    def info(self):
        return email.message.Message()


@pytest.fixture
def server(tmp_path, monkeypatch):
    """URL -> bytes served; `requests` lists what was fetched. TORCH_HOME is a fresh folder."""
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    served, requests = {}, []

    def urlopen(req):
        requests.append(req.full_url)
        if req.full_url not in served:
            raise AssertionError(f'unexpected download of {req.full_url}')
        return Response(served[req.full_url])
    monkeypatch.setattr(torch.hub, 'urlopen', urlopen)
    return served, requests


def cache_dir():
    return torch.hub.get_dir() + '/checkpoints'


def test_a_url_is_downloaded_once_then_read_like_a_file(server, tmp_path):
    from peco_mm.checkpoint import read_checkpoint
    served, requests = server
    torch.save({'state_dict': {'w': torch.arange(3.)}}, tmp_path / 'w.pth')
    served[BASE + 'w.pth'] = (tmp_path / 'w.pth').read_bytes()
    for _ in range(2):
        ckpt = read_checkpoint(BASE + 'w.pth')
        torch.testing.assert_close(ckpt['state_dict']['w'], torch.arange(3.))
    assert requests == [BASE + 'w.pth']  # the second read came from the cache
    assert (tmp_path / 'torch_home/hub/checkpoints/w.pth').read_bytes() == served[BASE + 'w.pth']


def test_the_hash_in_the_file_name_is_checked(server, tmp_path):
    from peco_mm.checkpoint import read_checkpoint
    served, _ = server
    torch.save({'state_dict': {'w': torch.ones(2)}}, tmp_path / 'w.pth')
    data = (tmp_path / 'w.pth').read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    served[BASE + f'tiny-{digest[:8]}.pth'] = data
    assert 'state_dict' in read_checkpoint(BASE + f'tiny-{digest[:8]}.pth')
    wrong = 'tiny-00000000.pth' if not digest.startswith('00000000') else 'tiny-11111111.pth'
    served[BASE + wrong] = data
    with pytest.raises(ValueError, match=rf'{wrong}: invalid hash value .*discarded'):
        read_checkpoint(BASE + wrong)
    assert sorted(os.listdir(cache_dir())) == [f'tiny-{digest[:8]}.pth']  # nothing kept


def test_hostile_urls_on_every_route(server, tmp_path, monkeypatch):
    """The cache holds what a download of each URL left; every route refuses it."""
    monkeypatch.setenv(BUDGET_ENV, BUDGET_MB)
    from mmengine.runner import Runner
    from mmengine.runner.checkpoint import get_torchvision_models

    from peco_mm.checkpoint import checkpoints_through_gate
    from peco_mm.models import PeCoViT
    from peco_mm.tokenizer import FrozenPeCoTokenizer
    files, marker, _ = build_corpus(tmp_path)
    os.makedirs(cache_dir())
    for name, path in files.items():
        shutil.copy(path, f'{cache_dir()}/{path.name}')
    resnet = os.path.basename(get_torchvision_models()['resnet18'])
    shutil.copy(files['pickle_zip'], f'{cache_dir()}/{resnet}')
    runner = Runner(model=PeCoViT(**TINY_VIT), work_dir=str(tmp_path / 'work'),
                    experiment_name='hostile_urls')

    def head(url):
        import mmpretrain.models  # noqa: F401
        from mmengine.registry import DefaultScope
        from mmpretrain.registry import MODELS
        with DefaultScope.overwrite_default_scope('mmpretrain'):
            MODELS.build(dict(type='LinearClsHead', num_classes=2, in_channels=16,
                              init_cfg=dict(type='Pretrained', checkpoint=url))).init_weights()
    routes = {
        'load_from': runner.load_checkpoint,
        'resume': runner.resume,
        'backbone init_cfg': lambda url: PeCoViT(
            **TINY_VIT, init_cfg=dict(type='Pretrained', checkpoint=url)).init_weights(),
        'head init_cfg (mmpretrain)': head,
        'FrozenPeCoTokenizer': FrozenPeCoTokenizer,
    }
    with checkpoints_through_gate():  # as in PeCo's runs (the launcher, the tools)
        for route, call in routes.items():
            for name, path in files.items():
                local = f'{cache_dir()}/{path.name}'
                check_refused(lambda: call(BASE + path.name), local, EXPECTED[name], marker)
        check_refused(lambda: runner.load_checkpoint('torchvision://resnet18'),
                      f'{cache_dir()}/{resnet}', EXPECTED['pickle_zip'], marker)
    assert server[1] == []  # nothing was downloaded


def test_a_url_naming_code_is_refused_as_a_target_generator(server, tmp_path, monkeypatch):
    """The pretraining target from a URL: the registry-name payloads are refused as from
    a local file, nothing imported."""
    import sys

    from peco_mm.tokenizer import FrozenPeCoTokenizer
    files, marker = build_name_corpus(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, path in files.items():
        server[0][BASE + path.name] = path.read_bytes()
        check_refused(lambda: FrozenPeCoTokenizer(BASE + path.name), BASE + path.name,
                      NAME_EXPECTED[name], marker)
    assert TRACE_MODULE not in sys.modules


def test_a_good_url_initialises_a_backbone(server, tmp_path):
    from peco_mm.models import PeCoViT
    served, _ = server
    torch.manual_seed(0)
    src = PeCoViT(**TINY_VIT)
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in src.state_dict().items()}},
               tmp_path / 'vit.pth')
    served[BASE + 'vit.pth'] = (tmp_path / 'vit.pth').read_bytes()
    dst = PeCoViT(**TINY_VIT, init_cfg=dict(type='Pretrained', checkpoint=BASE + 'vit.pth'))
    dst.init_weights()
    for k, v in src.state_dict().items():
        torch.testing.assert_close(dst.state_dict()[k], v)


def test_resume_from_a_url_is_refused_with_a_hint():
    """--resume continues a run from its own file; a URL's weights come in with load_from."""
    from mmengine.config import Config

    from peco_mm.supervisor.launch import apply_cli
    with pytest.raises(ValueError, match=rf'--resume {BASE}w.pth: resuming takes a local '
                       'checkpoint file .* load_from=URL'):
        apply_cli(Config(dict()), 'work', 'cfg.py', BASE + 'w.pth', False, 'none')


def test_load_from_a_url_with_another_codebook_is_refused(server, tmp_path):
    """`load_from=URL` is checked as a local file is: a target generator of another codebook
    size is refused before it is loaded."""
    from types import SimpleNamespace

    from peco_mm.engine.hooks import LoadFromCheckHook
    model = torch.nn.Module()
    model.target_generator = torch.nn.Embedding(16, 8)  # this run's codebook: K = 16
    torch.save({'state_dict': {'target_generator.weight': torch.zeros(32, 8)}},
               tmp_path / 'peco.pth')
    server[0][BASE + 'peco.pth'] = (tmp_path / 'peco.pth').read_bytes()
    with pytest.raises(ValueError, match=rf'load_from {BASE}peco.pth: its target generator .*'
                       r'1 weights of another shape \(e.g. target_generator.weight: \(32, 8\) '
                       r'in the checkpoint, \(16, 8\) in this model\)'):
        LoadFromCheckHook(BASE + 'peco.pth').before_run(SimpleNamespace(model=model))
    assert server[1] == [BASE + 'peco.pth']


def test_a_missing_url_says_so_in_one_line(server, monkeypatch):
    import urllib.error

    from peco_mm.checkpoint import read_checkpoint

    def not_found(req):
        raise urllib.error.HTTPError(req.full_url, 404, 'Not Found', email.message.Message(),
                                     None)
    monkeypatch.setattr(torch.hub, 'urlopen', not_found)
    with pytest.raises(ValueError) as info:
        read_checkpoint(BASE + 'gone.pth')
    assert str(info.value) == (f'{BASE}gone.pth: download failed (HTTP 404 Not Found); '
                               f'nothing was kept in {cache_dir()}')
    assert not os.path.exists(cache_dir()) or os.listdir(cache_dir()) == []


def test_a_download_cut_short_is_not_kept(server, tmp_path):
    """A connection that closes early leaves a short file: it is removed, so that the next
    read downloads it again."""
    from peco_mm.checkpoint import read_checkpoint
    served, requests = server
    torch.save({'state_dict': {'w': torch.arange(4096.)}}, tmp_path / 'w.pth')
    data = (tmp_path / 'w.pth').read_bytes()
    served[BASE + 'w.pth'] = data[:len(data) // 2]
    with pytest.raises(ValueError, match=rf'^{BASE}w.pth: the download is no readable '
                       r'checkpoint \(truncated or corrupt zip archive .*it was discarded'):
        read_checkpoint(BASE + 'w.pth')
    assert os.listdir(cache_dir()) == []
    served[BASE + 'w.pth'] = data
    assert read_checkpoint(BASE + 'w.pth')['state_dict']['w'].shape == (4096,)
    assert requests == [BASE + 'w.pth'] * 2


class MemoryStore:
    """A file backend holding bytes in memory (no network), standing for an object store."""
    files: dict = {}

    def __init__(self, **backend_args) -> None:
        pass

    def get(self, filepath) -> bytes:
        return self.files[str(filepath)]


@pytest.fixture
def stores(monkeypatch):
    """MemoryStore as mmengine's petrel backend (s3:// and petrel://, what mmengine's own
    loader asks for) and under a prefix a user registers (memstore://), for this test only."""
    from mmengine.fileio.backends import backends, prefix_to_backends
    monkeypatch.setattr(MemoryStore, 'files', {})
    monkeypatch.setitem(backends, 'petrel', MemoryStore)
    for prefix in ('s3', 'petrel', 'memstore'):
        monkeypatch.setitem(prefix_to_backends, prefix, MemoryStore)
    return MemoryStore.files


def tiny_fpn(checkpoint=None):
    from mmdet.models.necks import FPN
    init = dict(type='Pretrained', checkpoint=checkpoint) if checkpoint else None
    return FPN(in_channels=[4, 8], out_channels=4, num_outs=2, init_cfg=init)


def test_import_leaves_mmengine_and_torch_alone_and_s3_checkpoints_load(stores, tmp_path):
    """After `import peco_mm`, every checkpoint scheme has mmengine's own loader, torch's
    process-wide allow-list holds none of the types peco_mm allows for its reads, and a stock
    mmdet model loads its init_cfg checkpoint from an s3:// store as mmengine loads it."""
    import peco_mm  # noqa: F401
    from mmengine.runner.checkpoint import CheckpointLoader

    from peco_mm.checkpoint.reader import mmengine_checkpoint_types
    loaders = CheckpointLoader._schemes.values()  # (mmengine's table; read only)
    assert {f.__module__ for f in loaders} == {'mmengine.runner.checkpoint'}
    allowed = torch.serialization.get_safe_globals()
    assert [t for t in mmengine_checkpoint_types() if t in allowed] == []
    torch.manual_seed(0)
    src = tiny_fpn()
    torch.save({'state_dict': src.state_dict()}, tmp_path / 'fpn.pth')
    stores['s3://bucket/fpn.pth'] = (tmp_path / 'fpn.pth').read_bytes()
    dst = tiny_fpn('s3://bucket/fpn.pth')
    dst.init_weights()
    for k, v in src.state_dict().items():
        torch.testing.assert_close(dst.state_dict()[k], v)


def test_in_a_run_remote_stores_are_read_through_the_gate(stores, tmp_path):
    """Inside `checkpoints_through_gate` (PeCo's runs) s3://, petrel:// and a prefix a user
    registered with mmengine's file backends still load, their bytes read by the gate: a
    hostile file there is refused with its remote name."""
    from peco_mm.checkpoint import checkpoints_through_gate
    files, marker, _ = build_corpus(tmp_path)
    torch.manual_seed(0)
    src = tiny_fpn()
    torch.save({'state_dict': src.state_dict()}, tmp_path / 'fpn.pth')
    urls = ('s3://bucket/fpn.pth', 'cluster:s3://bucket/fpn.pth', 'petrel://b/fpn.pth',
            'memstore://b/fpn.pth')
    for url in urls:
        stores[url] = (tmp_path / 'fpn.pth').read_bytes()
    for name in ('pickle_zip', 'cfg_expression'):
        stores[f's3://bucket/{name}.pth'] = files[name].read_bytes()
    with checkpoints_through_gate():
        for url in urls:
            dst = tiny_fpn(url)
            dst.init_weights()
            for k, v in src.state_dict().items():
                torch.testing.assert_close(dst.state_dict()[k], v, msg=url)
        for name in ('pickle_zip', 'cfg_expression'):
            url = f's3://bucket/{name}.pth'
            check_refused(lambda: tiny_fpn(url).init_weights(), url, EXPECTED[name], marker)
