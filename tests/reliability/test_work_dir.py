"""The work dir on resume: a copied work dir resumes from its own checkpoints (not from the
folder its `last_checkpoint` was written in), and says which file it uses."""
import shutil

import torch


def test_copied_work_dir_resumes_from_its_own_files(tmp_path):
    from mmengine.config import Config

    from peco_mm.engine.hooks import find_resumable_checkpoint
    from peco_mm.engine.hooks.safeguards import add_safeguards
    original, copy = tmp_path / 'original', tmp_path / 'copy'
    original.mkdir()
    torch.save({'meta': {'iter': 2}, 'state_dict': {}}, original / 'iter_2.pth')
    (original / 'last_checkpoint').write_text(str(original / 'iter_2.pth'))
    shutil.copytree(original, copy)
    torch.save({'meta': {'iter': 99}, 'state_dict': {}}, original / 'iter_2.pth')  # moved on
    found, notes = find_resumable_checkpoint(str(copy))
    assert found == str(copy / 'iter_2.pth')
    assert notes == [f'resume: last_checkpoint names {original / "iter_2.pth"}, outside this '
                     f'work dir (a copied or moved work dir?); looking for iter_2.pth in {copy}']
    cfg = Config(dict(work_dir=str(copy), resume=True, load_from=None))
    notes = add_safeguards(cfg)
    assert cfg.load_from == str(copy / 'iter_2.pth')
    assert notes[-1] == f'resume: using {copy / "iter_2.pth"}'
    (copy / 'last_checkpoint').write_text('iter_2.pth')  # a relative name: in the work dir
    assert find_resumable_checkpoint(str(copy))[0] == str(copy / 'iter_2.pth')


def test_disk_full_during_a_save(tmp_path, cls_data, isolated_mmengine, monkeypatch):
    import errno

    import pytest
    from mmengine.fileio.backends import local_backend

    from peco_mm.engine.launch import run
    from tests.reliability.conftest import run_log, scalars, write_cls
    put = local_backend.LocalBackend.put
    saves = []

    def put_until_full(self, obj, filepath):
        if '.pth' not in str(filepath):
            return put(self, obj, filepath)
        saves.append(filepath)
        if len(saves) < 2:
            return put(self, obj, filepath)
        with open(filepath, 'wb') as f:  # the disk fills up half-way through iter_4
            f.write(obj[:len(obj) // 2])
        raise OSError(errno.ENOSPC, 'No space left on device')

    cfg = write_cls(tmp_path / 'cls.py', cls_data, iters=4, interval=2, keep=2)
    work = tmp_path / 'work'
    monkeypatch.setattr(local_backend.LocalBackend, 'put', put_until_full)
    with pytest.raises(OSError) as err:
        run(str(cfg), str(work))
    monkeypatch.undo()
    part = work / 'iter_4.pth.part'
    assert err.value.errno == errno.ENOSPC
    assert str(err.value).startswith(f'[Errno 28] No space left on device while writing {part} '
                                     '(')
    assert f'MiB free in {work}); the unfinished file was removed' in str(err.value)
    assert not part.exists() and (work / 'iter_2.pth').is_file()
    assert (work / 'last_checkpoint').read_text().strip().endswith('iter_2.pth')
    (work / 'iter_4.pth.part').write_bytes(b'\0' * 1000)  # as a kill in the write leaves it
    run(str(cfg), str(work), resume='auto')
    assert [r['iter'] for r in scalars(work) if 'loss' in r] == [3, 4]
    assert f'resume: removed {part} (0.0 MiB), an unfinished write' in run_log(work)
    assert not part.exists() and torch.load(work / 'iter_4.pth', weights_only=True)
