"""One training run per work dir.

Two runs started in the same work dir write the same `iter_N.pth.part`, rename each other's
files away, and one dies with `FileNotFoundError` while both logs look normal. The launcher
takes `<work_dir>/.peco_lock` before training and refuses a second run with a message that
names the owner.

The lock is the file's `flock`, held by the run for its whole life (the kernel drops it when
the process ends, however it ends); the file's text (the owner's host, pid and start time) is
what the message shows. Only the process holding the flock decides about the file, so of two
processes that find the same stale lock exactly one takes it over. A lock file left by a
process that no longer runs on this host (killed, crashed), or an empty one (killed between
creating and writing it), is taken over with a log line.

Override (for a lock on a shared file system whose owner is known to be gone, e.g. on another
host): set the environment variable `PECO_MM_IGNORE_WORK_DIR_LOCK=1`.
"""
from __future__ import annotations

import atexit
import contextlib
import datetime
import errno
import fcntl
import json
import os
import os.path as osp
import socket
import time

LOCK_NAME = '.peco_lock'
OVERRIDE_ENV = 'PECO_MM_IGNORE_WORK_DIR_LOCK'
_HELD: dict[str, tuple[int, int]] = {}  # lock path -> (pid, open file holding its flock)
_BUSY_TRIES = 40  # a held lock that names no live run yet: re-read for up to 2 s


def lock_work_dir(work_dir: str) -> str | None:
    """Take the work dir's lock (rank 0 only); return a line to log, or None. Raise
    RuntimeError naming the owner when another live run holds it."""
    if int(os.environ.get('RANK', os.environ.get('SLURM_PROCID', '0')) or 0) != 0:
        return None
    os.makedirs(work_dir, exist_ok=True)
    path = osp.join(work_dir, LOCK_NAME)
    if _HELD.get(path, (None,))[0] == os.getpid():  # a second run in one process (a resume)
        return None
    me = dict(host=socket.gethostname(), pid=os.getpid(),
              started=datetime.datetime.now().isoformat(timespec='seconds'))
    for attempt in range(_BUSY_TRIES):
        fd, created = open_flocked(path)
        if fd is not None:
            break
        if os.environ.get(OVERRIDE_ENV) == '1':  # held, but known to be gone
            fd, created = os.open(path, os.O_RDWR | os.O_CREAT), False
            break
        owner = read_owner(path)
        if attempt == _BUSY_TRIES - 1 or owner and not names_gone_run(owner):
            raise in_use_error(path, owner)
        time.sleep(0.05)  # its holder is taking it over: its own text is not written yet
    try:
        note = None if created else take_over_note(path, read_owner(path), me)
    except RuntimeError:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(me).encode(), 0)
    os.fsync(fd)
    _HELD[path] = (os.getpid(), fd)
    atexit.register(unlock_work_dir, work_dir)
    return note


def open_flocked(path: str) -> tuple[int | None, bool]:
    """(an open file of `path` whose exclusive flock this process now holds, whether this
    call created the file), or (None, False) when another process holds it. Retries when the
    file was removed or replaced meanwhile (its owner's run ended), so the flock held is
    always that of the file at `path`."""
    while True:
        try:
            fd, created = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
        except FileExistsError:
            try:
                fd, created = os.open(path, os.O_RDWR), False
            except FileNotFoundError:
                continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None, False
        except OSError as e:  # a file system without flock: the pid check alone decides
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                os.close(fd)
                raise
        with contextlib.suppress(FileNotFoundError):
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd, created
        os.close(fd)


def take_over_note(path: str, owner: dict, me: dict) -> str | None:
    """With the flock of an existing lock file held: a log line when it names no run (empty:
    a run killed between creating and writing it) or a run that is gone (or the override is
    set); RuntimeError naming the owner when it names a live run (one that holds no flock:
    an older peco_mm, or a run on another host of a shared file system)."""
    if not owner:
        return (f'{path}: took over a lock file that names no run (empty or unreadable: a run '
                'killed while it started)')
    if owner.get('host') == me['host'] and owner.get('pid') == me['pid']:
        return None
    if os.environ.get(OVERRIDE_ENV) == '1':
        return (f'{path} names another run ({describe(owner)}); taken over because '
                f'{OVERRIDE_ENV}=1')
    if names_gone_run(owner):
        return f'{path}: took over the stale lock of {describe(owner)}, which no longer runs'
    raise in_use_error(path, owner)


def names_gone_run(owner: dict) -> bool:
    """True when the lock text names a process of this host that no longer runs."""
    return owner.get('host') == socket.gethostname() and not pid_alive(owner.get('pid'))


def in_use_error(path: str, owner: dict) -> RuntimeError:
    return RuntimeError(
        f'work dir {osp.dirname(path)} is in use by another training run ({describe(owner)}; '
        f'lock file {path}). Two runs in one work dir overwrite each other\'s checkpoints: use '
        'another --work-dir, or wait for that run to end. If it is gone (e.g. it ran on '
        f'another host), delete the lock file or set {OVERRIDE_ENV}=1.')


def unlock_work_dir(work_dir: str) -> None:
    """Remove the lock if this process holds it (the file first, then the flock, so that no
    other process takes the flock of a file that is being removed)."""
    path = osp.join(work_dir, LOCK_NAME)
    pid, fd = _HELD.get(path, (None, None))
    if pid != os.getpid():  # not held, or held by the process this one was forked from
        return
    del _HELD[path]
    owner = read_owner(path)
    if owner.get('host') == socket.gethostname() and owner.get('pid') == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
    os.close(fd)


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
