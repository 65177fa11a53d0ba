"""No process outlives the one that started it (peco_mm/supervisor/process_tree.py): a data loader
worker dies with its rank, and the launcher ends whatever is left when torchrun exits, so
`tools/dist_train.sh ... | tee log` returns after a rank is killed."""
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith('linux'), reason='Linux prctl')
SUPERVISOR = ROOT / 'peco_mm' / 'supervisor' / 'process_tree.py'
# a "rank": forks a busy "worker" (as a data loader does), writes its pid, then is killed by
# SIGKILL, as the kernel's out-of-memory killer does; the worker holds the rank's stdout
RANK = r'''
import importlib.util, multiprocessing as mp, os, signal, sys, time
if {tie}:  # the module alone (importing peco_mm would import torch: seconds)
    spec = importlib.util.spec_from_file_location('process_tree', {module!r})
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.tie_forked_children()

def busy():
    time.sleep(60)  # a long __getitem__

if __name__ == '__main__':
    worker = mp.get_context('fork').Process(target=busy)
    worker.start()
    open({pid_file!r}, 'w').write(str(worker.pid))
    print('rank started', flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
'''


def _alive(pid: int) -> bool:
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().split(') ')[1][0] != 'Z'
    except FileNotFoundError:
        return False


def _rank(tmp_path, tie: bool):
    script = tmp_path / 'rank.py'
    pid_file = tmp_path / 'worker.pid'
    script.write_text(RANK.format(module=str(SUPERVISOR), tie=tie, pid_file=str(pid_file)))
    return script, pid_file


def _wait_gone(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.05)
    return not _alive(pid)


def test_a_forked_worker_dies_with_its_killed_parent(tmp_path):
    for tie in (True, False):  # without the tie: the worker outlives the rank
        script, pid_file = _rank(tmp_path, tie)
        proc = subprocess.run([sys.executable, str(script)], stdout=subprocess.DEVNULL,
                              timeout=30)
        assert proc.returncode == -9
        worker = int(pid_file.read_text())
        try:
            assert _wait_gone(worker, 1.0) == tie, f'tie={tie}'
        finally:
            if _alive(worker):
                os.kill(worker, 9)


def test_the_launcher_ends_what_a_killed_rank_left_and_frees_the_pipe(tmp_path):
    """The supervisor runs the "rank" (untied: as torchrun's children would leave it) with its
    output into a pipe, like `| tee`: the pipe closes at once, the worker is ended, the exit
    status is the rank's (128 + 9)."""
    script, pid_file = _rank(tmp_path, tie=False)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(SUPERVISOR), sys.executable, str(script)],
                          capture_output=True, text=True, timeout=30)
    took = time.monotonic() - start
    worker = int(pid_file.read_text())
    assert not _alive(worker)
    assert proc.returncode == 137 and 'rank started' in proc.stdout
    assert 'launcher: ended 1 process(es) that outlived python' in proc.stderr.replace(
        os.path.basename(sys.executable), 'python')
    assert took < 10, f'{took:.1f} s'  # SIGTERM ends the sleeping worker at once
    # an ordinary command: its status and output, nothing else said
    ok = subprocess.run([sys.executable, str(SUPERVISOR), sys.executable, '-c', 'print(1)'],
                        capture_output=True, text=True, timeout=30)
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, '1\n', '')


def test_the_supervisor_signals_only_what_it_started(tmp_path):
    """Exec'd by a shell that started a job before (as `cmd & exec tools/dist_train.sh` does),
    the supervisor has that job as a child: the killed rank's worker is ended, the job is not."""
    script, pid_file = _rank(tmp_path, tie=False)
    caller = 'sleep 300 >/dev/null 2>&1 & echo $! > sleep.pid; exec "$0" "$@"'
    proc = subprocess.run(['bash', '-c', caller, sys.executable, str(SUPERVISOR),
                           sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=30)
    job = int((tmp_path / 'sleep.pid').read_text())
    try:
        assert proc.returncode == 137 and not _alive(int(pid_file.read_text()))
        assert 'launcher: ended 1 process(es)' in proc.stderr
        assert _alive(job)
    finally:
        if _alive(job):
            os.kill(job, 9)


def _supervised(tmp_path, code: str) -> tuple[subprocess.Popen, int]:
    """The supervisor running `python -c code`, once the command has started (it writes its
    pid after `code`), and the command's pid."""
    pid_file = tmp_path / 'command.pid'
    pid_file.unlink(missing_ok=True)
    command = f'{code}\nimport os, time\nopen({str(pid_file)!r}, "w").write(str(os.getpid()))\n' \
              'time.sleep(60)'
    proc = subprocess.Popen([sys.executable, str(SUPERVISOR), sys.executable, '-c', command])
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc, int(pid_file.read_text())


def test_the_command_ends_when_the_supervisor_is_killed(tmp_path):
    proc, pid = _supervised(tmp_path, '')
    try:
        proc.kill()  # SIGKILL: nothing of the supervisor runs
        proc.wait()
        assert _wait_gone(pid, 5.0)
    finally:
        if _alive(pid):
            os.kill(pid, 9)


def test_ctrl_c_reaches_the_command_as_one_sigterm(tmp_path):
    """SIGINT or SIGTERM on the supervisor: torchrun is sent SIGTERM, which it passes on to
    the ranks, so they end at once instead of unwinding a KeyboardInterrupt."""
    got = tmp_path / 'got'
    record = ('import signal, sys\n'
              'def record(sig, _):\n'
              f'    open({str(got)!r}, "a").write(signal.Signals(sig).name + "\\n")\n'
              '    sys.exit(3)\n'
              'signal.signal(signal.SIGINT, record)\n'
              'signal.signal(signal.SIGTERM, record)')
    for sig in (signal.SIGINT, signal.SIGTERM):
        got.unlink(missing_ok=True)
        proc, pid = _supervised(tmp_path, record)
        proc.send_signal(sig)
        assert (proc.wait(timeout=30), got.read_text()) == (3, 'SIGTERM\n'), sig


def test_dist_scripts_run_torchrun_under_the_supervisor():
    # both start torchrun through torchrun_args.sh's torchrun_tool (the exact command lines:
    # tests/tools/test_launch_flags.py::test_shell_tools_start_the_command_their_usage_says)
    for script in ('dist_train.sh', 'dist_test.sh'):
        text = (ROOT / 'tools' / script).read_text()
        assert 'torchrun_args.sh' in text and '\ntorchrun_tool ' in text, script
    text = (ROOT / 'tools' / 'torchrun_args.sh').read_text()
    assert ('exec "$PY" "$ROOT/peco_mm/supervisor/process_tree.py" \\\n'
            '    "$PY" -P -m torch.distributed.run') in text


# the module alone, its fork hooks registered (as `launch.run` does in every rank)
TIED = '''
import importlib.util, multiprocessing as mp, os, signal, subprocess, sys, time
spec = importlib.util.spec_from_file_location('process_tree', {module!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module.tie_forked_children()
'''
# a tied "rank" forks a "worker" (as a data loader does) that forks in turn: a plain os.fork()
# and a subprocess.run with preexec_fn (both run the at-fork hooks); the worker's exit status is
# 0 only if both grandchildren exited 0, and the rank exits with the worker's status
FORKING_WORKER = TIED + r'''
def work():
    child = os.fork()
    if child == 0:
        os._exit(0)
    forked = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    ran = subprocess.run([sys.executable, '-c', 'pass'], preexec_fn=lambda: None).returncode
    print('grandchildren', forked, ran, flush=True)
    sys.exit(forked or ran)

if __name__ == '__main__':
    worker = mp.get_context('fork').Process(target=work)
    worker.start()
    worker.join()
    sys.exit(worker.exitcode)
'''
# the tie still holds one level down: a worker's forked child dies when the worker is killed
KILLED_WORKER = TIED + r'''
def work():
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    open({pid_file!r}, 'w').write(str(child))
    os.kill(os.getpid(), signal.SIGKILL)

if __name__ == '__main__':
    worker = mp.get_context('fork').Process(target=work)
    worker.start()
    worker.join()
'''


def test_a_worker_of_a_tied_process_can_fork(tmp_path):
    script = tmp_path / 'rank.py'
    script.write_text(FORKING_WORKER.format(module=str(SUPERVISOR)))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stdout) == (0, 'grandchildren 0 0\n'), proc.stderr


def test_a_workers_forked_child_dies_with_the_worker(tmp_path):
    script, pid_file = tmp_path / 'rank.py', tmp_path / 'grandchild.pid'
    script.write_text(KILLED_WORKER.format(module=str(SUPERVISOR), pid_file=str(pid_file)))
    subprocess.run([sys.executable, str(script)], timeout=60, check=True)
    grandchild = int(pid_file.read_text())
    try:
        assert _wait_gone(grandchild, 1.0)
    finally:
        if _alive(grandchild):
            os.kill(grandchild, 9)
