"""tools/dist_train.sh ends only what it started: the calling shell's earlier background job
outlives a run, and Ctrl-C or SIGTERM on the launcher, which end every process of torchrun's
tree within seconds and leave a readable checkpoint. The tools' Python never searches the
current directory (an empty PYTHONPATH entry, or torchrun's `-m`)."""
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.engine.test_process_tree import _alive
from tests.tools.conftest import TINY_CLS, process_tree, signal_tree, write

pytestmark = pytest.mark.skipif(not sys.platform.startswith('linux'), reason='Linux /proc')
# the calling shell starts a job of its own, then execs the launcher (as a job script does)
CALLER = 'sleep 300 & echo $! > sleep.pid; exec bash "$0" "$@"'
# a module of the standard library's name in the current directory: it says that it was
# imported, then puts the real one in its place, so the run goes on either way
SHADOW = '''import importlib.util, os, sys, sysconfig
with open({marker!r}, 'a') as f:
    f.write(f'{{os.getpid()}} {{sys.argv}}\\n')
spec = importlib.util.spec_from_file_location(
    'subprocess', os.path.join(sysconfig.get_paths()['stdlib'], 'subprocess.py'))
real = importlib.util.module_from_spec(spec)
sys.modules['subprocess'] = real
spec.loader.exec_module(real)
'''
# the tiny classifier, long enough to be stopped, a checkpoint every 2 steps and two
# persistent data loader workers per rank (processes the launcher must end too)
LONG_RUN = TINY_CLS + """
default_hooks['checkpoint'].update(interval=2)
train_dataloader.update(num_workers=2, persistent_workers=True)
"""


class Launch:
    """tools/dist_train.sh CONFIG 1 ARGS, exec'd by a shell that started `sleep 300 &` first,
    in a folder that holds a subprocess.py, with PYTHONPATH unset."""

    def __init__(self, tmp_path, cfg, *args):
        self.cwd = tmp_path / 'cwd'
        self.cwd.mkdir()
        self.marker = tmp_path / 'imported_from_cwd'
        (self.cwd / 'subprocess.py').write_text(SHADOW.format(marker=str(self.marker)))
        self.work_dir, self.log = tmp_path / 'wd', tmp_path / 'launch.log'
        env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
        env.update(OMP_NUM_THREADS='1', PYTHON=sys.executable)
        with open(self.log, 'w') as log:
            self.proc = subprocess.Popen(
                ['bash', '-c', CALLER, str(ROOT / 'tools' / 'dist_train.sh'), str(cfg), '1',
                 '--work-dir', str(self.work_dir), *args], cwd=self.cwd, env=env, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)  # its own group, as in a shell
        deadline = time.monotonic() + 10
        while not (self.cwd / 'sleep.pid').exists() or not (
                self.cwd / 'sleep.pid').read_text().strip():
            assert time.monotonic() < deadline, 'the calling shell did not start its job'
            time.sleep(0.05)
        self.sleep = int((self.cwd / 'sleep.pid').read_text())

    def output(self) -> str:
        return self.log.read_text()

    def end(self):
        """SIGKILL to whatever is left of the launch and to the shell's job."""
        signal_tree(process_tree(self.proc.pid))
        signal_tree([self.sleep])
        self.proc.wait()


@pytest.fixture(scope='module')
def finished_run(tmp_path_factory):
    """A 2-step run to its end (with the pre-flight check)."""
    from peco_mm.tooling.demo_data import make_class_folder
    tmp = tmp_path_factory.mktemp('launch')
    make_class_folder(tmp / 'data' / 'train')
    make_class_folder(tmp / 'data' / 'val', seed=1, per_class=4)
    run = Launch(tmp, write(tmp / 'cls.py', TINY_CLS, data=tmp / 'data', iters=2))
    try:
        run.proc.wait(timeout=300)
        yield run, _alive(run.sleep)
    finally:
        run.end()


def test_the_calling_shells_earlier_job_outlives_a_run(finished_run):
    run, sleep_alive = finished_run
    assert run.proc.returncode == 0, run.output()[-3000:]
    assert (run.work_dir / 'iter_2.pth').exists()
    assert sleep_alive  # the launcher's pid was the shell's, and the sleep its child
    assert 'launcher: ended' not in run.output()  # nothing of torchrun's tree was left


def test_no_tool_imports_from_the_current_directory(finished_run):
    """With PYTHONPATH unset: neither the pre-flight check, the supervisor, torchrun nor a
    rank imported the subprocess.py of the folder the launcher was started in."""
    run, _ = finished_run
    assert run.proc.returncode == 0, run.output()[-3000:]
    assert not run.marker.exists(), run.marker.read_text()


@pytest.mark.parametrize('how', ['SIGTERM to the launcher', 'Ctrl-C (SIGINT to its group)'])
def test_ctrl_c_and_sigterm_end_the_launchers_processes_only(how, tmp_path, image_folder):
    from peco_mm.checkpoint import read_checkpoint
    run = Launch(tmp_path, write(tmp_path / 'cls.py', LONG_RUN, data=image_folder, iters=2000),
                 '--skip-preflight')
    try:
        deadline = time.monotonic() + 300
        while not (run.work_dir / 'iter_4.pth').exists():
            assert time.monotonic() < deadline and run.proc.poll() is None, run.output()[-3000:]
            time.sleep(0.2)
        started = [p for p in process_tree(run.proc.pid) if p != run.sleep]
        assert len(started) >= 5, started  # supervisor, torchrun, the rank and its 2 workers
        t0 = time.monotonic()
        if how.startswith('SIGTERM'):
            os.kill(run.proc.pid, signal.SIGTERM)
        else:  # the terminal signals the foreground group; the shell's job ignores SIGINT
            os.killpg(run.proc.pid, signal.SIGINT)
        rc = run.proc.wait(timeout=60)
        while any(map(_alive, started)) and time.monotonic() - t0 < 30:
            time.sleep(0.05)
        took = time.monotonic() - t0
        assert not [p for p in started if _alive(p)] and took < 10, (took, run.output()[-3000:])
        assert rc != 0 and _alive(run.sleep)
        last = (run.work_dir / 'last_checkpoint').read_text().strip()
        step = read_checkpoint(last, map_location='cpu')['meta']['iter']
        assert last.endswith(f'iter_{step}.pth') and step >= 4
        print(f'{how}: every process of the launch ended {took:.1f} s after the signal')
    finally:
        run.end()


@pytest.mark.parametrize('caller, expected', [
    (None, ''), ('', ''), (':/a::/b:', ':/a:/b'), ('/a', ':/a')])
def test_the_tools_pythonpath_has_no_empty_entry(caller, expected, tmp_path):
    """The PYTHONPATH each launcher gives its commands (shown by a PYTHON and an srun that
    print it): the repository, then the caller's entries; an empty entry would be the current
    directory, searched before the standard library."""
    fake = tmp_path / 'python'
    fake.write_text('#!/usr/bin/env bash\necho "PYTHONPATH=${PYTHONPATH-unset}"\n')
    fake.chmod(0o755)
    (tmp_path / 'srun').symlink_to(fake)
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'PECO_SKIP_PREFLIGHT')}
    env.update(PYTHON=str(fake), PATH=f'{tmp_path}:{env["PATH"]}')
    if caller is not None:
        env['PYTHONPATH'] = caller
    for tool, args in (('dist_train.sh', ['c.py', '1']), ('dist_test.sh', ['c.py', 'w.pth', '1']),
                       ('slurm_train.sh', ['part', 'job', 'c.py'])):
        out = subprocess.run(['bash', f'tools/{tool}', *args], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        shown = out.stdout.splitlines()
        assert shown and set(shown) == {f'PYTHONPATH={ROOT}{expected}'}, (tool, shown)
