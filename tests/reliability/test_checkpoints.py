"""Checkpoints survive a kill inside their write, and `--resume` survives a broken one.

The slowed writer below stands in for a large checkpoint on a slow disk: it writes half of
the second checkpoint, signals the test, and sleeps, so the SIGKILL lands inside the write.
"""
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.conftest import ROOT
from tests.reliability.conftest import scalars, write_cls

from peco_mm.checkpoint import read_checkpoint

SLOW_WRITER = r'''
import os, runpy, sys, time
from mmengine.fileio.backends import local_backend
put = local_backend.LocalBackend.put
count = [0]
def slow_put(self, obj, filepath):
    if '.pth' not in str(filepath):
        return put(self, obj, filepath)
    count[0] += 1
    if count[0] < 2:
        return put(self, obj, filepath)
    with open(filepath, 'wb') as f:  # the 2nd checkpoint: half, then wait to be killed
        f.write(obj[:len(obj) // 2])
        f.flush()
        open(os.environ['WRITING'], 'w').close()
        time.sleep(120)
        f.write(obj[len(obj) // 2:])
local_backend.LocalBackend.put = slow_put
sys.argv = ['tools/train.py', *sys.argv[1:]]
runpy.run_path('tools/train.py', run_name='__main__')
'''


def test_kill_inside_checkpoint_write_then_resume(tmp_path, cls_data, isolated_mmengine):
    cfg = write_cls(tmp_path / 'cls.py', cls_data, iters=4, interval=2, keep=1)
    work = tmp_path / 'work'
    script = tmp_path / 'slow_train.py'
    script.write_text(SLOW_WRITER)
    marker = tmp_path / 'writing'
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1', WRITING=str(marker))
    proc = subprocess.Popen([sys.executable, str(script), str(cfg), '--work-dir', str(work)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.time() + 240
        while not marker.exists():
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            assert time.time() < deadline, 'the second checkpoint write never started'
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)  # inside the write of iter_4
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # the intact iter_2 is still there and last_checkpoint names it; iter_4 never appeared
    assert (work / 'iter_2.pth').is_file() and not (work / 'iter_4.pth').exists()
    assert (work / 'last_checkpoint').read_text().strip().endswith('iter_2.pth')
    assert read_checkpoint(work / 'iter_2.pth')['meta']['iter'] == 2

    from peco_mm.supervisor.launch import run
    run(str(cfg), str(work), resume='auto')
    iters = [r['iter'] for r in scalars(work) if 'loss' in r]
    assert iters == [3, 4]  # continued from iteration 2, not from scratch
    assert read_checkpoint(work / 'iter_4.pth')['meta']['iter'] == 4
    assert not (work / 'iter_2.pth').exists()  # max_keep_ckpts=1, removed after iter_4
    # plain data: torch's own weights-only loader reads it, with no allow-list
    assert torch.load(work / 'iter_4.pth', weights_only=True)['meta']['iter'] == 4


@pytest.mark.parametrize('damage', ['truncated', 'missing', 'empty_pointer'])
def test_resume_falls_back_to_newest_readable(tmp_path, damage):
    from peco_mm.supervisor.resume import find_resumable_checkpoint
    for i in (2, 4):
        torch.save({'meta': {'iter': i}, 'state_dict': {'w': torch.ones(64)}},
                   tmp_path / f'iter_{i}.pth')
        time.sleep(0.01)
    os.utime(tmp_path / 'iter_2.pth', (1, 1))  # older
    newest = tmp_path / 'iter_4.pth'
    (tmp_path / 'last_checkpoint').write_text(str(newest))
    if damage == 'truncated':
        newest.write_bytes(newest.read_bytes()[:300])
    elif damage == 'missing':
        newest.unlink()
    else:
        (tmp_path / 'last_checkpoint').write_text('')
    found, notes = find_resumable_checkpoint(str(tmp_path))
    if damage == 'empty_pointer':  # iter_4 intact: found by its time stamp
        assert found == str(newest) and 'is empty' in notes[0]
        return
    assert found == str(tmp_path / 'iter_2.pth')
    why = 'missing' if damage == 'missing' else 'truncated or corrupt'
    assert notes == [f'resume: skipped {newest}: ' + notes[0].split(': ', 2)[2]]
    assert why in notes[0]


def test_resume_from_a_truncated_path_says_so(tmp_path, cls_data, isolated_mmengine):
    from peco_mm.supervisor.launch import run
    cfg = write_cls(tmp_path / 'cls.py', cls_data)
    work = tmp_path / 'work'
    work.mkdir()
    good = work / 'iter_2.pth'
    torch.save({'meta': {'iter': 2}, 'state_dict': {}}, good)
    bad = work / 'iter_4.pth'
    bad.write_bytes(good.read_bytes()[:100])
    with pytest.raises(ValueError, match=rf'--resume {bad}: truncated or corrupt zip archive '
                       rf'\(100 bytes\), not a readable checkpoint\. The newest readable '
                       rf'checkpoint of the work dir is {good}'):
        run(str(cfg), str(work), resume=str(bad))


def test_kept_and_best_checkpoints_are_renamed_then_pruned(tmp_path, cls_data, isolated_mmengine):
    """max_keep_ckpts and save_best as mmengine's hook gives them, with every file written as
    `.part` and renamed; the message hub in each file names the final files; a resume with a
    smaller max_keep_ckpts prunes the older ones."""
    from peco_mm.supervisor.launch import run
    cfg = write_cls(tmp_path / 'cls.py', cls_data, iters=6, interval=1, keep=2)
    work = tmp_path / 'work'
    opts = {'train_cfg.val_interval': 2, 'default_hooks.checkpoint.save_best': 'accuracy/top1',
            'default_hooks.checkpoint.rule': 'greater'}
    run(str(cfg), str(work), opts)
    names = sorted(p.name for p in work.glob('*.pth*'))
    best = [n for n in names if n.startswith('best_accuracy_top1_iter_')]
    assert len(best) == 1 and names == sorted(best + ['iter_5.pth', 'iter_6.pth'])
    assert (work / 'last_checkpoint').read_text().strip() == str(work / 'iter_6.pth')
    info = read_checkpoint(work / 'iter_6.pth')['message_hub']['runtime_info']
    assert info['last_ckpt'] == str(work / 'iter_6.pth')
    assert info['kept_checkpoints'] == [str(work / 'iter_5.pth'), str(work / 'iter_6.pth')]
    assert info['best_ckpt'] == str(work / best[0])
    run_id = read_checkpoint(work / 'iter_6.pth')['meta']['run_id']
    opts.update({'train_cfg.max_iters': 7, 'default_hooks.checkpoint.max_keep_ckpts': 1})
    run(str(cfg), str(work), opts, resume='auto')
    assert sorted(p.name for p in work.glob('iter_*')) == ['iter_7.pth']
    assert read_checkpoint(work / 'iter_7.pth')['meta']['run_id'] == run_id  # one lineage


def resume_checkpoint_hook(work, kept, keep=1, lines=None, **hub_info):
    """AtomicCheckpointHook.before_train of a run resumed in `work` whose message hub lists
    `kept` (and `hub_info`, e.g. its `run_id`); the lines it logged about what it left alone
    (every line it logged goes to `lines` when given)."""
    from types import SimpleNamespace

    from mmengine.logging import MessageHub

    from peco_mm.engine.hooks import AtomicCheckpointHook
    hub = MessageHub(f'kept_{work.name}_{len(kept)}_{sorted(hub_info)}')
    hub.update_info('kept_checkpoints', kept)
    for key, value in hub_info.items():
        hub.update_info(key, value)
    lines = [] if lines is None else lines
    runner = SimpleNamespace(work_dir=str(work), message_hub=hub,
                             logger=SimpleNamespace(info=lines.append, warning=lines.append))
    hook = AtomicCheckpointHook(interval=1, by_epoch=False, max_keep_ckpts=keep,
                                save_best='accuracy/top1', rule='greater')
    hook.before_train(runner)
    return hook, [line for line in lines if 'left alone' in line]


LINEAGE = 'a' * 32  # a run lineage's identity, as the hook makes it (uuid4().hex)
OTHER = 'b' * 32


def save_checkpoint_of(path, run_id=None):
    """A small checkpoint at `path`, recording `run_id` (None: written before run ids)."""
    meta = {'iter': 1} if run_id is None else {'iter': 1, 'run_id': run_id}
    torch.save({'meta': meta, 'state_dict': {'w': torch.ones(2)}}, path)


def test_resuming_a_copied_work_dir_prunes_its_own_files_only(tmp_path):
    """The kept checkpoints a copied work dir's files list name the original folder: the
    copy prunes its own files of those names (they record the run lineage), the original
    keeps every one."""
    orig, copy = tmp_path / 'orig', tmp_path / 'copy'
    for folder in (orig, copy):
        folder.mkdir()
        for i in (1, 2, 3):
            save_checkpoint_of(folder / f'iter_{i}.pth', LINEAGE)
    resume_checkpoint_hook(copy, [str(orig / f'iter_{i}.pth') for i in (1, 2, 3)],
                           run_id=LINEAGE)
    assert sorted(p.name for p in orig.iterdir()) == ['iter_1.pth', 'iter_2.pth', 'iter_3.pth']
    assert sorted(p.name for p in copy.iterdir()) == ['iter_3.pth']


def test_a_resumed_checkpoint_deletes_nothing_it_did_not_write(tmp_path, monkeypatch):
    """Kept and best checkpoints naming another folder's file, '../x', a folder, a file of
    the work dir that is no checkpoint, or no string are left alone, with one log line."""
    work = tmp_path / 'work'
    work.mkdir()
    monkeypatch.chdir(work)  # where '../x' points at tmp_path / 'x'
    (tmp_path / 'x').write_bytes(b'x')
    (tmp_path / 'folder').mkdir()
    (tmp_path / 'folder' / 'data').write_bytes(b'x')
    (tmp_path / 'best_acc_iter_1.pth').write_bytes(b'x')
    (work / 'notes.txt').write_bytes(b'x')
    for i in (1, 2):
        save_checkpoint_of(work / f'iter_{i}.pth', LINEAGE)
    hostile = [str(tmp_path / 'x'), '../x', str(tmp_path / 'folder'), str(work / 'notes.txt'), 7]
    hook, lines = resume_checkpoint_hook(
        work, hostile + [str(work / 'iter_1.pth'), str(work / 'iter_2.pth')],
        best_ckpt=str(tmp_path / 'x'), run_id=LINEAGE)
    assert sorted(p.name for p in tmp_path.iterdir()) == ['best_acc_iter_1.pth', 'folder',
                                                          'work', 'x']
    assert (tmp_path / 'folder' / 'data').exists()
    assert sorted(p.name for p in work.iterdir()) == ['iter_2.pth', 'notes.txt']
    assert hook.kept == [str(work / 'iter_2.pth')] and hook.best_ckpt_path is None
    assert len(lines) == 2 and 'lists 5 kept checkpoints' in lines[0], lines
    # a best checkpoint named from elsewhere is taken as this work dir's file of that name
    hook, lines = resume_checkpoint_hook(work, [], best_ckpt=str(tmp_path / 'best_acc_iter_1.pth'))
    assert hook.best_ckpt_path == str(work / 'best_acc_iter_1.pth') and not lines


def test_a_foreign_checkpoint_resumed_in_a_work_dir_deletes_none_of_its_files(tmp_path):
    """A downloaded checkpoint resumed in a work dir of other runs: its kept list names
    iter_100/200/300/400, which are there, written by another run (one before run ids were
    recorded, and iter_300.pth a folder). Pruning to max_keep_ckpts=1 deletes none of them,
    removes no folder, and says so for each; its best checkpoint's namesake is left too."""
    work = tmp_path / 'work'
    work.mkdir()
    save_checkpoint_of(work / 'iter_100.pth', OTHER)
    save_checkpoint_of(work / 'iter_200.pth')  # before run ids
    (work / 'iter_300.pth').mkdir()
    (work / 'iter_300.pth' / 'notes.txt').write_text('mine')
    save_checkpoint_of(work / 'iter_400.pth', OTHER)
    save_checkpoint_of(work / 'best_acc_iter_100.pth', OTHER)
    kept = [f'/elsewhere/iter_{i}.pth' for i in (100, 200, 300, 400)]
    logged = []
    hook, lines = resume_checkpoint_hook(work, kept, lines=logged, run_id=LINEAGE,
                                         best_ckpt='/elsewhere/best_acc_iter_100.pth')
    assert sorted(p.name for p in work.iterdir()) == [
        'best_acc_iter_100.pth', 'iter_100.pth', 'iter_200.pth', 'iter_300.pth', 'iter_400.pth']
    assert (work / 'iter_300.pth' / 'notes.txt').read_text() == 'mine'
    assert hook.best_ckpt_path is None  # mmengine's hook never deletes it for a better one
    assert not [line for line in logged if 'removed' in line]
    pruned = [line for line in lines if '(beyond max_keep_ckpts=1) left alone' in line]
    assert [line.split()[1] for line in pruned] == [
        str(work / f'iter_{i}.pth') for i in (100, 200, 300)], lines
    assert any('folders are never deleted' in line for line in lines)
    assert any('best_acc_iter_100.pth' in line and 'another run' in line for line in lines)


def test_pruning_deletes_the_lineages_files_and_logs_each(tmp_path):
    """Files that record the lineage's run id, and files this process wrote (whatever they
    hold), are deleted, each with a log line."""
    work = tmp_path / 'work'
    work.mkdir()
    for i in (1, 2, 3):
        save_checkpoint_of(work / f'iter_{i}.pth', LINEAGE)
    logged = []
    hook, _ = resume_checkpoint_hook(work, [str(work / f'iter_{i}.pth') for i in (1, 2, 3)],
                                     keep=1, lines=logged, run_id=LINEAGE)
    assert sorted(p.name for p in work.iterdir()) == ['iter_3.pth']
    removed = [line for line in logged if line.startswith('removed checkpoint')]
    assert removed == [f'removed checkpoint {work / f"iter_{i}.pth"} (beyond max_keep_ckpts=1)'
                       for i in (1, 2)]
    (work / 'iter_4.pth').write_bytes(b'written by this process')
    hook.written.add(str(work / 'iter_4.pth'))
    hook.prune([str(work / 'iter_4.pth')])
    assert not (work / 'iter_4.pth').exists()
    assert logged[-1] == f'removed checkpoint {work / "iter_4.pth"} (beyond max_keep_ckpts=1)'
