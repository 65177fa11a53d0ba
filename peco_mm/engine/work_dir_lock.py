"""One training run per work dir.

Two runs started in the same work dir write the same `iter_N.pth.part`, rename each other's
files away, and one dies with `FileNotFoundError` while both logs look normal. The launcher
takes `<work_dir>/.peco_lock` (the owner's host, pid and start time) before training and
refuses a second run with a message that names the owner. A lock left by a process that no
longer runs on this host (killed, crashed) is taken over with a log line.

Override (for a lock on a shared file system whose owner is known to be gone, e.g. on another
host): set the environment variable `PECO_MM_IGNORE_WORK_DIR_LOCK=1`.
"""
from __future__ import annotations

import atexit
import contextlib
import datetime
import json
import os
import os.path as osp
import socket

LOCK_NAME = '.peco_lock'
OVERRIDE_ENV = 'PECO_MM_IGNORE_WORK_DIR_LOCK'


def lock_work_dir(work_dir: str) -> str | None:
    """Take the work dir's lock (rank 0 only); return a line to log, or None. Raise
    RuntimeError naming the owner when another live run holds it."""
    if int(os.environ.get('RANK', os.environ.get('SLURM_PROCID', '0')) or 0) != 0:
        return None
    os.makedirs(work_dir, exist_ok=True)
    path = osp.join(work_dir, LOCK_NAME)
    me = dict(host=socket.gethostname(), pid=os.getpid(),
              started=datetime.datetime.now().isoformat(timespec='seconds'))
    note = None
    for _ in range(2):  # a second try after removing a stale lock
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = read_owner(path)
            if owner.get('host') == me['host'] and owner.get('pid') == me['pid']:
                break  # this process (a second run in one process, e.g. a resume)
            if os.environ.get(OVERRIDE_ENV) == '1':
                note = (f'{path} names another run ({describe(owner)}); taken over because '
                        f'{OVERRIDE_ENV}=1')
            elif owner.get('host') == me['host'] and not pid_alive(owner.get('pid')):
                note = (f'{path}: took over the stale lock of {describe(owner)}, which no '
                        'longer runs')
            else:
                raise RuntimeError(
                    f'work dir {work_dir} is in use by another training run '
                    f'({describe(owner)}; lock file {path}). Two runs in one work dir '
                    'overwrite each other\'s checkpoints: use another --work-dir, or wait for '
                    'that run to end. If it is gone (e.g. it ran on another host), delete '
                    f'the lock file or set {OVERRIDE_ENV}=1.')
            with contextlib.suppress(FileNotFoundError):  # another process removed it first
                os.remove(path)
            continue
        with os.fdopen(fd, 'w') as f:
            json.dump(me, f)
        break
    atexit.register(unlock_work_dir, work_dir)
    return note


def unlock_work_dir(work_dir: str) -> None:
    """Remove the lock if this process holds it."""
    path = osp.join(work_dir, LOCK_NAME)
    owner = read_owner(path)
    if owner.get('host') == socket.gethostname() and owner.get('pid') == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def read_owner(path: str) -> dict:
    try:
        with open(path) as f:
            owner = json.load(f)
    except (OSError, ValueError):  # gone meanwhile, or half-written
        return {}
    return owner if isinstance(owner, dict) else {}


def describe(owner: dict) -> str:
    return (f"pid {owner.get('pid', '?')} on host {owner.get('host', '?')}, started "
            f"{owner.get('started', '?')}")


def pid_alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True
