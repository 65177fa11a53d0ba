"""The read budget cannot be talked past: sizes that are no plain numbers, numpy's array
constructors, a zip archive's pickle named twice, object arrays, shared dict keys and graphs
that shared references blow up are refused before torch reads a byte of the pickle, by the
check that reads the file as torch will; real checkpoints (a ViT-H state dict with its
optimizer state, mmengine's meta and message hub) pass it.

The files are `budget_payloads.py`'s; `test_hostile_files.py` runs them on every route.
"""
import collections
import io
import os
import re
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest
import torch

from peco_mm.checkpoint.budget import BUDGET_ENV, check_read_budget
from tests.conftest import ROOT
from tests.security.budget_payloads import (BUDGET_EXPECTED, SIZE, WEIGHTS, Call,
                                            _reconstruct, build_budget_corpus, pickle_twice,
                                            process_killers, shared_tuple, torch_bytes)
from tests.security.hostile import BUDGET_MB


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    return build_budget_corpus(tmp_path_factory.mktemp('budget'))


@pytest.fixture
def budget(monkeypatch):
    monkeypatch.setenv(BUDGET_ENV, BUDGET_MB)


def reader_safe_globals():
    from peco_mm.checkpoint.reader import mmengine_checkpoint_types
    return torch.serialization.safe_globals(mmengine_checkpoint_types())


@pytest.mark.parametrize('name', BUDGET_EXPECTED)
def test_refused_before_torch_reads(name, files, budget, monkeypatch):
    """One line naming the file and what a checkpoint holds instead; torch.load is never
    reached, so nothing of the file is allocated (the object array included)."""
    from peco_mm.checkpoint import read_checkpoint

    def no_load(*args, **kwargs):
        raise AssertionError('torch.load reached')
    monkeypatch.setattr(torch, 'load', no_load)
    with pytest.raises(ValueError) as info:
        read_checkpoint(files[name])
    msg = str(info.value)
    assert '\n' not in msg and msg.startswith(f'{files[name]}: '), msg
    assert re.search(BUDGET_EXPECTED[name], msg), msg


def test_the_payloads_are_live(files):
    """Read without the check (torch's weights-only unpickler with the reader's types), each
    file does what the check refuses: allocates 8 MiB from a few kilobytes, holds Python
    objects in an array, hashes a shared key; torch reads the zip entry the check reads."""
    with reader_safe_globals():
        def x(name):
            return torch.load(files[name], weights_only=True)['x']
        for name in ('size_numpy_int', 'size_numpy_int_legacy', 'zip_pickle_twice',
                     'legacy_then_zip'):
            assert isinstance(x(name), bytearray) and len(x(name)) == SIZE, name
            assert files[name].stat().st_size < 10_000
        for name in ('alloc_ndarray', 'alloc_ndarray_legacy', 'alloc_reconstruct'):
            assert x(name).nbytes == SIZE, name
        assert x('object_array').dtype == object and list(x('object_array')) == [1, 'a', None]
        assert list(x('shared_key')) == [shared_tuple(16)]
    with zipfile.ZipFile(files['zip_pickle_twice']) as zf:  # Python's zipfile: the last one
        pkl = next(n for n in zf.namelist() if n.endswith('data.pkl'))
        assert b'bytearray' not in zf.read(pkl)
        assert b'bytearray' in zf.open(zf.infolist()[0]).read()  # the one torch reads
    assert zipfile.is_zipfile(files['legacy_then_zip'])  # a zip to Python, legacy to torch


def run_reads(paths, timeout: int, imports: str = '', routes: str = 'read_checkpoint'):
    """Each path read in a fresh process (after `imports`) by each of `routes`; name ->
    (seconds, the error's one line). A hang ends the process at `timeout`: the test fails
    instead of waiting."""
    code = f'''
import sys, time
{imports}
from peco_mm.checkpoint import read_checkpoint
from peco_mm.models import PeCoViT
from peco_mm.tokenizer import FrozenPeCoTokenizer
routes = dict(read_checkpoint=read_checkpoint, from_checkpoint=PeCoViT.from_checkpoint,
              FrozenPeCoTokenizer=FrozenPeCoTokenizer)
for path in sys.argv[1:]:
    for route in {routes.split()!r}:
        start = time.perf_counter()
        try:
            routes[route](path)
            err = 'read'
        except Exception as e:
            err = str(e)
        print(path, route, round(time.perf_counter() - start, 3), err.replace(chr(10), ' | '),
              sep='\\t', flush=True)
'''
    proc = subprocess.run([sys.executable, '-c', code, *map(str, paths)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1',
                                   **{BUDGET_ENV: BUDGET_MB}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split('\t') for line in proc.stdout.splitlines() if line.count('\t') == 3]
    return {(path, route): (float(s), err) for path, route, s, err in rows}


def test_a_shared_dict_key_hangs_no_loader(tmp_path):
    """40 levels of one shared tuple as a dict key (2^40 tuples to hash: torch.load and any
    loader without the check hang) in a zip archive, a legacy file and a legacy file's
    storage keys, and an object array numpy 1.26 crashes on: each refused in milliseconds."""
    files = process_killers(tmp_path)
    found = run_reads(files.values(), timeout=60)
    for name, path in files.items():
        seconds, err = found[(str(path), 'read_checkpoint')]
        expected = BUDGET_EXPECTED['object_array' if 'object' in name else 'shared_expansion']
        assert err.startswith(f'{path}: ') and re.search(expected, err), (name, err)
        assert seconds < 2, (name, seconds)


def test_every_payload_on_routes_of_a_process_with_the_hosts_models(files, tmp_path):
    """In a process that imported mmdet's, mmseg's and mmpretrain's models (every host
    registry full), the gate and the model and tokenizer routes refuse every payload."""
    killers = process_killers(tmp_path)
    paths = {**files, **killers}
    found = run_reads(paths.values(), timeout=300,
                      imports='import mmdet.models, mmseg.models, mmpretrain.models',
                      routes='read_checkpoint from_checkpoint FrozenPeCoTokenizer')
    for name, path in paths.items():
        expected = BUDGET_EXPECTED.get(name) or BUDGET_EXPECTED[
            'object_array' if 'object' in name else 'shared_expansion']
        for route in ('read_checkpoint', 'from_checkpoint', 'FrozenPeCoTokenizer'):
            seconds, err = found[(str(path), route)]
            assert str(path) in err and re.search(expected, err), (name, route, err)
            assert seconds < 5, (name, route, seconds)


def test_zip_entry_names_are_compared_as_torch_compares_them(tmp_path, budget):
    """torch's zip reader finds a name ignoring ASCII case, and reads data.pkl from the
    folder of the archive's first entry: a second entry that differs in case only is
    refused, and the check reads the entry torch reads."""
    from peco_mm.checkpoint.budget import torch_pickle_member
    data = torch_bytes({**WEIGHTS, 'x': Call(bytearray, SIZE)})
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        entries = [(n, zf.read(n)) for n in zf.namelist()]
    case = tmp_path / 'case.pth'
    with zipfile.ZipFile(case, 'w') as out:
        for name, blob in entries + [(entries[0][0].replace('data.pkl', 'DATA.PKL'), b'')]:
            out.writestr(name, blob)
    with pytest.raises(ValueError, match=r"holds 2 entries named '\w+/data\.pkl'"):
        check_read_budget(str(case))
    folder = entries[0][0].split('/')[0]
    other = tmp_path / 'other_folder.pth'  # another folder's data.pkl, listed last
    with zipfile.ZipFile(other, 'w') as out:
        for name, blob in [*entries, ('decoy/data.pkl', b'')]:
            out.writestr(name, blob)
    with zipfile.ZipFile(other) as zf:
        assert torch_pickle_member(zf).filename == f'{folder}/data.pkl'
    twice = tmp_path / 'twice.pth'
    twice.write_bytes(pickle_twice(WEIGHTS, WEIGHTS))
    with pytest.raises(ValueError, match=r'each entry name must appear once'):
        check_read_budget(str(twice))


def test_every_allow_listed_constructor_has_a_rule():
    """Every callable torch's weights-only unpickler allows, and every type the reader adds,
    is sized by a rule of `allocations.RULES` (a new torch's constructor fails here)."""
    import torch._weights_only_unpickler as unpickler

    from peco_mm.checkpoint.allocations import rule_for
    from peco_mm.checkpoint.reader import mmengine_checkpoint_types
    names = [n for n, v in unpickler._get_allowed_globals().items() if callable(v)]
    names += [f'{t.__module__}.{t.__qualname__}' for t in mmengine_checkpoint_types()]
    assert len(names) > 60
    assert [n for n in names if rule_for(n) is None] == []


def play(obj):
    from peco_mm.checkpoint.pickle_model import PickleModel
    model = PickleModel()
    model.walk(io.BytesIO(pickle_bytes(obj)), 1)
    return model


def pickle_bytes(obj) -> bytes:
    import pickle
    return pickle.dumps(obj, protocol=2)


def test_what_each_constructor_is_counted():
    """Bytes the model counts, call by call (what torch would allocate)."""
    from peco_mm.checkpoint.pickle_model import Refusal
    n = 1000
    assert play(Call(bytearray, n)).total == n
    assert play(Call(torch.FloatTensor, 10, 20)).total == 8 * 200
    assert play(Call(np.ndarray, (10, 20), np.dtype('i2'))).total == 2 * 200
    assert play(Call(np.ndarray, (n,))).total == 8 * n  # float64 by default
    rebuilt = Call(torch._tensor._rebuild_from_type_v2, bytearray, torch.Tensor, (n,), {})
    assert play(rebuilt).total == n  # the function it is handed is what runs
    state = (1, (n,), np.dtype('f4'), False, b'')
    reconstructed = Call(_reconstruct, np.ndarray, (0,), b'b', state=state)
    assert play(reconstructed).total == 4 * n + 1  # (+ b'b', the type code)
    assert play(Call(set, torch.zeros(n))).total >= 64 * n  # one object an element
    assert play(Call(bytearray, Call(np.int64, n))).unresolved  # a call result as a size
    assert play(Call(bytearray, 'x' * 100, 'utf-16')).unresolved  # an unknown codec
    for dtype in (np.dtype('O'), np.dtype([('a', 'O')])):
        with pytest.raises(Refusal, match='dtype object'):
            play(np.zeros(2, dtype=dtype))
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(Refusal, match='after sharing it'):
        play(cycle)


def test_shared_keys_and_expansion_are_refused_at_their_bound():
    """A shared tuple is refused as a key at any depth; as a value, once the references it
    adds pass MAX_SHARED_EXPANSION (plus what the file writes): 19 levels pass, 20 do not."""
    from peco_mm.checkpoint.pickle_model import MAX_SHARED_EXPANSION, Refusal
    with pytest.raises(Refusal, match='as a dict key'):
        play(KeyedPair(shared_tuple(2)))
    assert play(KeyedPair(((1, 2), (3, 4)))).extra == 0  # unshared tuple keys pass
    model = play([shared_tuple(19)])
    assert 2**19 < model.extra <= MAX_SHARED_EXPANSION
    with pytest.raises(Refusal, match=r'meets more than \d+ \(the file writes'):
        play([shared_tuple(20)])


class KeyedPair:
    def __init__(self, key) -> None:
        self.key = key

    def __reduce__(self):
        return collections.OrderedDict, (), None, None, iter([(self.key, 1)])


def vit_h_checkpoint() -> dict:
    """What an mmengine run of a ViT-H writes, structure for structure (every tensor one
    element: the pickle is the same but for the numbers in its shapes): state dict, AdamW
    state, parameter schedulers, meta (config text, dataset classes) and the message hub as
    the launcher's checkpoint hook saves it."""
    from mmengine.logging import MessageHub

    from peco_mm.checkpoint.plain import plain_checkpoint
    from peco_mm.models import PeCoViT
    huge = dict(embed_dims=16, num_layers=32, num_heads=2)  # ViT-H's 32 blocks, narrow
    names = PeCoViT(arch=huge, img_size=32, patch_size=8).state_dict()
    sd = collections.OrderedDict((k, torch.zeros([1] * v.dim())) for k, v in names.items())
    state = {i: {'step': torch.tensor(5.), 'exp_avg': torch.zeros(1), 'exp_avg_sq':
                 torch.zeros(1)} for i in range(len(sd))}
    groups = [{'lr': 1e-3, 'betas': (0.9, 0.999), 'weight_decay': 0.05,
               'params': list(range(len(sd)))}]
    hub = MessageHub.get_instance('vit_h_structure')
    for step in range(50):
        hub.update_scalar('train/loss', 1.0 / (step + 1))
        hub.update_scalar('train/lr', 1e-3)
    classes = tuple(f'class_{i}' for i in range(1000))
    hub.update_info('dataset_meta', {'classes': classes})
    return plain_checkpoint(
        {'meta': {'cfg': 'model = dict(type="PeCoViT")\n' * 200, 'epoch': 1, 'iter': 50,
                  'dataset_meta': {'classes': classes}, 'seed': 0},
         'state_dict': sd, 'message_hub': hub.state_dict(),
         'optimizer': {'state': state, 'param_groups': groups},
         'param_schedulers': [{'base_lrs': [1e-3], 'last_step': 50}]})


@pytest.mark.parametrize('zipped', [True, False])
def test_a_real_checkpoint_passes_and_loads(tmp_path, zipped):
    """A ViT-H run's checkpoint, zip and legacy, is read: its shared references (dataset
    classes held in meta and the hub, storages) add a few thousand objects, far below the
    bound, and it allocates no more than its storages."""
    from peco_mm.checkpoint import read_checkpoint
    from peco_mm.checkpoint.budget import torch_pickle_member
    from peco_mm.checkpoint.pickle_model import MAX_SHARED_EXPANSION, PickleModel
    ckpt = vit_h_checkpoint()
    path = tmp_path / 'vit_h.pth'
    torch.save(ckpt, path, _use_new_zipfile_serialization=zipped)
    model = PickleModel()
    if zipped:
        with zipfile.ZipFile(path) as zf, zf.open(torch_pickle_member(zf)) as f:
            model.walk(f, 1)
    else:
        with open(path, 'rb') as f:
            model.walk(f, 5)
    assert model.unresolved is None and model.written > 10_000
    assert model.extra < 10_000 < MAX_SHARED_EXPANSION
    # a storage per weight and per AdamW tensor, and the plain hub's two per history buffer
    buffers = len(ckpt['message_hub']['log_scalars'])
    assert len(model.storages) == 3 * len(ckpt['state_dict']) + len(ckpt['state_dict']) + \
        2 * buffers
    start = time.perf_counter()
    check_read_budget(str(path))
    assert time.perf_counter() - start < 5
    back = read_checkpoint(path)
    assert list(back['state_dict']) == list(ckpt['state_dict'])
    assert back['meta']['dataset_meta']['classes'] == ckpt['meta']['dataset_meta']['classes']


@pytest.mark.parametrize('path', ['tests/security/data/legacy_tokenizer.pth',
                                  'tests/tokenizer/data/flat_arch_vit.pth',
                                  'tests/golden/golden.pt'])
def test_the_projects_own_files_pass(path):
    check_read_budget(str(ROOT / path))
