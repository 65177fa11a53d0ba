"""tools/tokenize_dataset.py as a long job: DataLoader workers, resuming after a kill, and
shards on several torchrun processes all give the codes of one uninterrupted run, which are
the tokenizer's own codes of each image."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from tests.conftest import ROOT, load_tool, run_tool

CNN = dict(base_channels=8, channel_mult=(1, 2), num_res_blocks=1)  # 2x down: 16 px -> 8x8
TINY = dict(encoder=dict(type='CNNEncoder', **CNN), decoder=dict(type='CNNDecoder', **CNN),
            quantizer=dict(type='EMAVectorQuantizer', embed_dims=8, num_embeddings=32))


@pytest.fixture(scope='module')
def job(tmp_path_factory):
    """A tiny tokenizer checkpoint (architecture in its meta, as tools/train.py writes it) and
    a folder of 40 random 16 px images in two sub-folders."""
    from PIL import Image

    from peco_mm.tokenizer import PeCoTokenizer
    root = tmp_path_factory.mktemp('tokenize')
    torch.manual_seed(0)
    tok = PeCoTokenizer(**TINY, perceptual_weight=0.0)
    ckpt = root / 'tok.pth'
    torch.save({'state_dict': tok.state_dict(), 'meta': {'tokenizer_parts': tok.arch_parts}},
               ckpt)
    rng = np.random.default_rng(0)
    for i in range(40):
        d = root / 'images' / ('a' if i % 2 else 'b')
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(d / f'{i}.png')
    return ckpt, root / 'images'


def tokenize_argv(job, out, *extra):
    ckpt, images = job
    argv = ['tools/tokenize_dataset.py', ckpt, images, '--out', out, '--img-size', 16,
            '--batch-size', 3, '--device', 'cpu', *extra]
    return argv if '--chunk-size' in extra else argv + ['--chunk-size', 4]


def tokenize(job, out, *extra):
    """The tool in this process (its DataLoader workers are still processes)."""
    return load_tool('tokenize_dataset').main([str(a) for a in tokenize_argv(job, out, *extra)[1:]])


def codes_of(path):
    with np.load(path) as f:
        return f['codes'], list(f['files']), int(f['num_embeddings'])


@pytest.fixture(scope='module')
def reference(job, tmp_path_factory):
    """One uninterrupted run with 2 DataLoader workers."""
    out = tmp_path_factory.mktemp('ref') / 'codes.npz'
    tokenize(job, out, '--workers', 2)
    return codes_of(out)


def test_two_workers_give_the_tokenizers_codes(job, reference):
    from peco_mm.tokenizer import FrozenPeCoTokenizer
    from peco_mm.tooling.images import find_images, load_images
    codes, files, k = reference
    ckpt, images = job
    paths = find_images(images)
    assert files == [os.path.relpath(p, images) for p in paths] and k == 32
    tok = FrozenPeCoTokenizer(str(ckpt))
    with torch.no_grad():
        expected = tok.encode(load_images(paths)).numpy()
    assert codes.shape == (40, 8, 8) and codes.dtype == np.uint16
    np.testing.assert_array_equal(codes, expected)
    assert len(np.unique(codes)) > 4  # not a degenerate codebook


def test_kill_and_resume_gives_the_same_codes(job, reference, tmp_path, capsys):
    """One image per chunk here (40 chunks), so the kill lands mid-job."""
    out = tmp_path / 'codes.npz'
    parts = tmp_path / 'codes.npz.parts'
    # a session that stops after 3 chunks, then a real SIGKILL mid-job
    tokenize(job, out, '--workers', 2, '--chunk-size', 1, '--stop-after', 3)
    assert sorted(p.name for p in parts.glob('chunk_*.npy')) == [
        f'chunk_{c:06d}.npy' for c in range(3)] and not out.exists()
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1')
    argv = tokenize_argv(job, out, '--workers', 2, '--chunk-size', 1)
    proc = subprocess.Popen([sys.executable, *map(str, argv)], cwd=ROOT, env=env,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while len(list(parts.glob('chunk_*.npy'))) < 4 and time.time() < deadline:
        time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGKILL)  # the tool and its DataLoader workers
    proc.wait()
    done = len(list(parts.glob('chunk_*.npy')))
    assert 4 <= done < 40 and not out.exists(), done
    (parts / 'chunk_000039.npy.tmp').write_bytes(b'half-written')  # a chunk cut off mid-write
    tokenize(job, out, '--workers', 2, '--chunk-size', 1)
    assert f'{done} of its 40 chunks done' in capsys.readouterr().out
    codes, files, _ = codes_of(out)
    np.testing.assert_array_equal(codes, reference[0])
    assert files == reference[1] and not parts.exists()


def test_two_torchrun_processes_give_the_same_codes(job, reference, tmp_path):
    out = tmp_path / 'codes.npz'
    ckpt, images = job
    run_tool([sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2',
              '--master_port', str(29500 + os.getpid() % 1000), 'tools/tokenize_dataset.py',
              ckpt, images, '--out', out, '--img-size', 16, '--batch-size', 3, '--chunk-size',
              4, '--device', 'cpu', '--workers', 1], timeout=300)
    codes, files, _ = codes_of(out)
    np.testing.assert_array_equal(codes, reference[0])
    assert files == reference[1]


def test_resume_refuses_another_jobs_chunks(job, tmp_path):
    out = tmp_path / 'codes.npz'
    tokenize(job, out, '--workers', 0, '--stop-after', 1)
    with pytest.raises(SystemExit, match=r'holds chunks of another job .*img_size'):
        tokenize(job, out, '--workers', 0, '--img-size', 8)
