"""No process outlives the training process that started it, and none outlives the launcher.

A data loader's workers are forked children of the rank. When the kernel kills a rank (out of
memory: SIGKILL), nothing tells its workers: torch's worker notices a dead parent only between
batches (it polls `os.getppid()` every 5 s while idle), a worker busy in a long
`__getitem__` or blocked writing its batch into a pipe that no one reads keeps running, and
torchrun signals the process groups of the ranks that are still running, not the group of
the one that died. The orphaned worker keeps its memory and the launcher's stdout, so
`tools/dist_train.sh ... | tee log` never returns.

- `tie_forked_children()` (called by `peco_mm.supervisor.launch.run` in every process) makes the
  kernel send SIGKILL to each process forked from then on (the data loader's workers, any fork
  start method, and what they fork in turn) when the process that forked it ends (Linux
  `prctl(PR_SET_PDEATHSIG)`).
- `supervise(argv)` (run as a script by tools/dist_train.sh and dist_test.sh, standard
  library only) ends only what it started. The shell execs it, so its pid may already have
  children (the shell's earlier background jobs): it forks a keeper, a fresh process with no
  children, in a session of its own, which runs torchrun as a child subreaper
  (`PR_SET_CHILD_SUBREAPER`): the orphans of torchrun's tree, and only they, are re-parented
  to it. When torchrun exits (a rank died, or the job ended), the keeper sends SIGTERM to
  every process still below it, then SIGKILL after a grace period. The exit status is
  torchrun's.
- SIGINT (Ctrl-C) and SIGTERM on the supervisor reach torchrun as one SIGTERM, which torchrun
  passes on to the ranks: they end at once. (With SIGINT each rank would first unwind a
  KeyboardInterrupt, seconds on a busy machine, while torchrun waits up to 30 s.) The keeper
  also gets SIGTERM when the supervisor dies, even of SIGKILL.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
import traceback

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 5.0  # SIGTERM, then this long before SIGKILL
_tied = []  # non-empty once the fork hooks are registered (forked children inherit them)
_forking = [0]  # the pid of the process that is forking (set in it, read in its child)


def _prctl(option: int, value: int) -> bool:
    """Linux prctl(option, value); False where there is none (another system)."""
    if not sys.platform.startswith('linux'):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(option, value, 0, 0, 0) == 0


def _note_forking() -> None:
    _forking[0] = os.getpid()


def _die_with_parent() -> None:
    """In a forked child: SIGKILL from the kernel when the process that forked it ends (and
    now, if it already has: the signal is only sent for a death after the call)."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != _forking[0]:
        os._exit(1)


def tie_forked_children() -> bool:
    """Every process forked from now on, by this process or by its forked children, dies with
    the process that forked it. Linux only (False elsewhere). The kernel ties a child to the
    thread that forked it: data loaders create their workers in the training thread."""
    if not sys.platform.startswith('linux'):
        return False
    if not _tied:
        os.register_at_fork(before=_note_forking, after_in_child=_die_with_parent)
        _tied.append(os.getpid())
    return True


def children(pid: int) -> list[int]:
    """The live children of `pid` (Linux /proc)."""
    out = []
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # it has ended
        for task in os.listdir(f'/proc/{pid}/task'):
            with open(f'/proc/{pid}/task/{task}/children') as f:
                out += [int(c) for c in f.read().split()]
    return out


def end_descendants(grace_s: float = GRACE_S) -> list[int]:
    """SIGTERM to every process left below this one, SIGKILL to those still there after
    `grace_s`; reaps them. Returns the pids it signalled."""
    signalled = []
    deadline = time.monotonic() + grace_s
    sig = signal.SIGTERM
    while True:
        while True:  # reap what has ended
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if not pid:
                break
        left = children(os.getpid())
        if not left:
            return signalled
        if time.monotonic() > deadline:
            sig = signal.SIGKILL
        for pid in left:
            with contextlib.suppress(ProcessLookupError):  # ended in the meantime
                os.kill(pid, sig)
                signalled += [] if pid in signalled else [pid]
        time.sleep(0.05)


def _keep(argv: list[str], supervisor: int) -> int:
    """In the keeper: run `argv` as a child subreaper, send it SIGTERM for each SIGINT or
    SIGTERM, and once it exits end every process left below; returns the exit status."""
    os.setsid()  # the terminal's Ctrl-C reaches the supervisor alone, which passes it on
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # the supervisor ended: end torchrun's tree
    received = []  # signals that came before torchrun was started: passed on after
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda s, _: received.append(s))
    if os.getppid() != supervisor:  # it ended before the prctl call
        return 128 + signal.SIGTERM
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    proc = subprocess.Popen(argv)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda s, _: proc.send_signal(signal.SIGTERM))
    if received:
        proc.send_signal(signal.SIGTERM)
    rc = proc.wait()
    left = end_descendants()
    if left:
        print(f'launcher: ended {len(left)} process(es) that outlived {os.path.basename(argv[0])}'
              f' (pids {", ".join(map(str, left))}), e.g. data loader workers of a rank that '
              'died', file=sys.stderr)
    return rc if rc >= 0 else 128 - rc


def supervise(argv: list[str]) -> int:
    """Run `argv` (torchrun and its arguments) in a keeper process (see the module
    docstring), passing SIGINT and SIGTERM on to it; its exit status. The children this
    process had before are never signalled."""
    sys.stdout.flush()
    sys.stderr.flush()
    supervisor = os.getpid()
    keeper = os.fork()
    if keeper == 0:  # never returns: the caller's code is the supervisor's
        try:
            rc = _keep(argv, supervisor)
        except BaseException:  # e.g. no such command
            traceback.print_exc()
            rc = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda s, _: os.kill(keeper, s))
    _, status = os.waitpid(keeper, 0)
    rc = os.waitstatus_to_exitcode(status)
    return rc if rc >= 0 else 128 - rc


if __name__ == '__main__':
    if len(sys.argv) < 2:
        raise SystemExit('usage: python peco_mm/supervisor/process_tree.py COMMAND [ARGS...]')
    sys.exit(supervise(sys.argv[1:]))
