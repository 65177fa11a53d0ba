"""The work dir on resume: a copied work dir resumes from its own checkpoints (not from the
folder its `last_checkpoint` was written in), and says which file it uses."""
import shutil

import torch

from peco_mm.checkpoint import read_checkpoint


def test_copied_work_dir_resumes_from_its_own_files(tmp_path):
    from mmengine.config import Config

    from peco_mm.supervisor.resume import find_resumable_checkpoint
    from peco_mm.supervisor.safeguards import add_safeguards
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


def test_resume_with_no_readable_checkpoint_stops_instead_of_starting_over(tmp_path):
    import pytest
    from mmengine.config import Config

    from peco_mm.supervisor.safeguards import add_safeguards
    (tmp_path / 'iter_2.pth').write_bytes(b'PK\x03\x04 cut')  # a torn write
    cfg = Config(dict(work_dir=str(tmp_path), resume=True, load_from=None))
    with pytest.raises(FileNotFoundError) as err:
        add_safeguards(cfg)
    assert str(err.value).startswith(f'--resume: no checkpoint of the work dir {tmp_path} '
                                     f"reads back (resume: skipped {tmp_path / 'iter_2.pth'}: ")
    assert 'leave out --resume to start from scratch' in str(err.value)
    cfg = Config(dict(work_dir=str(tmp_path / 'nothing'), resume=True, load_from=None))
    with pytest.raises(FileNotFoundError, match='no checkpoint of the work dir .*nothing was'):
        add_safeguards(cfg)


def test_disk_full_during_a_save(tmp_path, cls_data, isolated_mmengine, monkeypatch):
    import errno

    import pytest
    from mmengine.fileio.backends import local_backend

    from peco_mm.supervisor.launch import run
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
    assert not part.exists() and read_checkpoint(work / 'iter_4.pth')


def write_lock(work, pid, host=None):
    import json
    import socket
    work.mkdir(parents=True, exist_ok=True)
    (work / '.peco_lock').write_text(json.dumps(dict(host=host or socket.gethostname(), pid=pid,
                                                     started='2026-01-01T00:00:00')))


def test_second_run_in_a_work_dir_is_refused(tmp_path, cls_data, isolated_mmengine,
                                             monkeypatch):
    import socket
    import subprocess
    import sys

    import pytest

    from peco_mm.supervisor.launch import run
    from tests.reliability.conftest import run_log, write_cls
    cfg = write_cls(tmp_path / 'cls.py', cls_data, iters=1, interval=1)
    work = tmp_path / 'work'
    other = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])
    try:
        write_lock(work, other.pid)  # a live run on this host holds the work dir
        with pytest.raises(RuntimeError) as err:
            run(str(cfg), str(work))
        msg = str(err.value)
        assert msg.startswith(f'work dir {work} is in use by another training run (pid '
                              f'{other.pid} on host {socket.gethostname()}, started '
                              f'2026-01-01T00:00:00; lock file {work / ".peco_lock"})')
        assert 'PECO_MM_IGNORE_WORK_DIR_LOCK=1' in msg
        assert not list(work.glob('*.pth')) and not list(work.glob('*/*.log'))
        monkeypatch.setenv('PECO_MM_IGNORE_WORK_DIR_LOCK', '1')  # the documented override
        run(str(cfg), str(work))
        assert 'taken over because PECO_MM_IGNORE_WORK_DIR_LOCK=1' in run_log(work)
        monkeypatch.delenv('PECO_MM_IGNORE_WORK_DIR_LOCK')
    finally:
        other.kill()
        other.wait()
    write_lock(work, other.pid)  # the same pid, now dead: a stale lock
    run(str(cfg), str(work / 'stale'))  # another work dir is not affected by it
    run(str(cfg), str(work), {'train_cfg.max_iters': 2}, resume='auto')
    assert f'took over the stale lock of pid {other.pid} on host' in run_log(work)
    assert not (work / '.peco_lock').exists()  # released at the end of the run


def try_lock(work, results, barrier):
    """In a forked process: take the lock at the barrier, report, hold it until all did."""
    import os

    from peco_mm.supervisor.work_dir_lock import lock_work_dir
    barrier.wait()
    try:
        results.put(('ok', os.getpid(), lock_work_dir(str(work))))
    except RuntimeError as e:
        results.put(('refused', os.getpid(), str(e)))
    barrier.wait()


def race_for_lock(work, n):
    """[(outcome, pid, note or message)] of n processes taking the lock at the same time."""
    import multiprocessing
    ctx = multiprocessing.get_context('fork')
    results, barrier = ctx.Queue(), ctx.Barrier(n)
    procs = [ctx.Process(target=try_lock, args=(work, results, barrier)) for _ in range(n)]
    for p in procs:
        p.start()
    out = [results.get(timeout=30) for _ in procs]
    for p in procs:
        p.join()
    return sorted(out, key=lambda r: r[0])


def test_racing_takeovers_of_a_stale_lock_leave_one_owner(tmp_path, monkeypatch):
    import subprocess
    import sys
    import time

    from peco_mm.supervisor import work_dir_lock
    gone = subprocess.Popen([sys.executable, '-c', 'pass'])
    gone.wait()
    work = tmp_path / 'work'
    write_lock(work, gone.pid)
    alive = work_dir_lock.pid_alive

    def slow_pid_alive(pid):  # widens the window between reading the lock and replacing it
        time.sleep(0.1)
        return alive(pid)

    monkeypatch.setattr(work_dir_lock, 'pid_alive', slow_pid_alive)
    out = race_for_lock(work, 5)
    assert [r[0] for r in out] == ['ok'] + ['refused'] * 4, out
    winner = out[0][1]
    assert out[0][2].endswith(f'took over the stale lock of pid {gone.pid} on host '
                              f'{__import__("socket").gethostname()}, started '
                              '2026-01-01T00:00:00, which no longer runs')
    for _, _, msg in out[1:]:  # every other process names the winner, not the dead run
        assert msg.startswith(f'work dir {work} is in use by another training run (pid '
                              f'{winner} on host'), msg


def test_empty_lock_file_is_taken_over_and_a_held_lock_refused(tmp_path):
    import json
    import os

    from peco_mm.supervisor.work_dir_lock import lock_work_dir, unlock_work_dir
    work = tmp_path / 'work'
    work.mkdir()
    (work / '.peco_lock').write_bytes(b'')  # a kill between creating and writing it
    note = lock_work_dir(str(work))
    try:
        assert note == (f'{work / ".peco_lock"}: took over a lock file that names no run '
                        '(empty or unreadable: a run killed while it started)')
        assert json.loads((work / '.peco_lock').read_text())['pid'] == os.getpid()
        (work / '.peco_lock').write_bytes(b'')  # the text is gone, the holder still runs
        out = race_for_lock(work, 1)
        assert out[0][0] == 'refused' and 'in use by another training run' in out[0][2]
    finally:
        (work / '.peco_lock').write_text(json.dumps(dict(
            host=__import__('socket').gethostname(), pid=os.getpid())))
        unlock_work_dir(str(work))
    assert not (work / '.peco_lock').exists()
    assert lock_work_dir(str(work)) is None  # a fresh lock: no note
    unlock_work_dir(str(work))
