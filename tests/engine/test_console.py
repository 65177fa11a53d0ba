"""What a run prints on the console (peco_mm.supervisor.console): no config dump or hook table
(the log file keeps them), the environment in one line, mmengine's data-loader restart said
once with its reason, machine notes once per process."""
import torch
from mmengine.logging import MMLogger

from peco_mm.supervisor import console

ENV = ('\n' + '-' * 60 + '\nSystem environment:\n    sys.platform: linux\n'
       '    Python: 3.11.7 (main, May  9 2026) [GCC 12.2.0]\n    CUDA available: False\n'
       '    PyTorch: 2.14.1\n    PyTorch compiling details: PyTorch built with:\n  - GCC 13.3\n'
       '    MMEngine: 0.10.7\n\nRuntime environment:\n    seed: 0\n'
       '    Distributed training: False\n' + '-' * 60 + '\n')


def _run_logs(tmp_path, capsys, name, show_config=False):
    logger = console.quiet(MMLogger.get_instance(name, log_file=str(tmp_path / f'{name}.log')),
                           show_config)
    logger.info(ENV)
    logger.info('Config:\nmodel = dict(type="PeCo")')
    logger.info('Hooks will be executed in the following order:\nbefore_run: ...')
    for _ in range(3):
        logger.warning('Reach the end of the dataloader, it will be restarted and continue to '
                       'iterate.')
    logger.info('Iter(train) [1/2]  loss: 1.0')
    for h in logger.handlers:
        h.flush()
    out = capsys.readouterr().out
    MMLogger._instance_dict.pop(name)
    for h in logger.handlers[:]:
        h.close()
        logger.removeHandler(h)
    return out, (tmp_path / f'{name}.log').read_text()


def test_console_gets_progress_and_the_log_file_everything(tmp_path, capsys):
    out, log = _run_logs(tmp_path, capsys, 'quiet_run')
    assert 'Config:' not in out and 'Hooks will be executed' not in out
    assert ('System environment: Python 3.11.7, CUDA available False, PyTorch 2.14.1, '
            'MMEngine 0.10.7 (all of it in the log file)') in out
    assert 'Runtime environment: seed: 0, Distributed: False\n' in out
    assert 'compiling details' not in out
    assert 'Iter(train) [1/2]' in out
    for text in (out, log):  # the restart: once, explained, not a warning
        assert 'Reach the end of the dataloader' not in text
        assert text.count(console.RESTART_NOTE) == 1
        assert 'WARNING' not in text
    assert 'Config:\nmodel = dict' in log and 'Hooks will be executed' in log
    assert 'PyTorch compiling details' in log


def test_show_config_keeps_the_console_as_mmengine_prints_it(tmp_path, capsys):
    out, _ = _run_logs(tmp_path, capsys, 'loud_run', show_config=True)
    assert 'Config:\nmodel = dict' in out and 'PyTorch compiling details' in out
    assert out.count(console.RESTART_NOTE) == 1  # said once either way


def test_a_runner_of_the_launcher_logs_its_environment_in_one_line(tmp_path, capsys):
    """The filters are on the runner's logger before it logs its environment, through
    mmengine's public `build_logger` (nothing of MMLogger or the Runner patched)."""
    from mmengine.runner import Runner
    from torch import nn
    get_instance = MMLogger.__dict__.get('get_instance')
    runner = console.quiet_runner_class(Runner)(model=nn.Linear(1, 1), work_dir=str(tmp_path),
                                                experiment_name='quiet_runner_env')
    assert MMLogger.__dict__.get('get_instance') is get_instance
    assert isinstance(runner, Runner) and type(runner).__name__ == 'Runner'
    out = capsys.readouterr().out
    assert 'System environment: Python' in out and '(all of it in the log file)' in out
    assert 'PyTorch compiling details' not in out
    for h in runner.logger.handlers:
        h.flush()
    assert 'PyTorch compiling details' in open(runner.logger.log_file).read()


def test_machine_notes_reach_the_console_once_per_process(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(console, '_SAID', set())
    logs = []
    for run in ('first_run', 'second_run'):
        logger = console.quiet(MMLogger.get_instance(run, log_file=str(tmp_path / f'{run}.log')))
        console.log_once_per_process(logger, 'No CUDA: training in fp32')
        console.log_once_per_process(logger, None)
        for h in logger.handlers[:]:
            h.close()
            logger.removeHandler(h)
        MMLogger._instance_dict.pop(run)
        logs.append((tmp_path / f'{run}.log').read_text())
    assert capsys.readouterr().out.count('No CUDA: training in fp32') == 1
    assert [log.count('No CUDA: training in fp32') for log in logs] == [1, 1]


def test_run_plan_prints_run_k_of_n_with_an_eta_from_the_finished_runs(capsys):
    from peco_mm.supervisor.console import RunPlan
    plan = RunPlan([('a', 'first', 10.0), ('b', 'second', 20.0), ('c', 'third', 30.0)])
    plan.start('a')
    plan.finish('a', 5.0)  # 0.5 s per cost unit
    plan.start('b', ': note')
    plan.finish('b', 20.0)  # now 25 s for 30 units
    plan.start('c')
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith('run 1 of 3: first (ETA after the first run)')
    assert lines[1].endswith('run 2 of 3: second: note (ETA 0m25s)')  # 50 units x 0.5 s
    assert lines[2].endswith('run 3 of 3: third (ETA 0m25s)')  # 30 units x 25 / 30 s


def test_output_to_keeps_a_run_off_the_console_and_shows_its_tail_on_error(tmp_path, capsys):
    import pytest

    from peco_mm.supervisor.console import output_to
    log = tmp_path / 'console.log'
    with output_to(log):
        print('step 1 of the run')
    with pytest.raises(ValueError), output_to(log):
        print('step 2 of the run')
        raise ValueError('bad input')
    out = capsys.readouterr()
    assert 'step 1' not in out.out and 'step 1' not in out.err.split('the end of')[0]
    assert f'run failed; the end of {log}' in out.err and 'step 2 of the run' in out.err
    assert 'ValueError: bad input' in log.read_text() and 'step 1' in log.read_text()


def test_mmseg_class_table_stays_in_the_log_file_unless_asked():
    """mmseg's IoUMetric logs a 150-row per-class table at every evaluation: the console
    filter drops it and its heading (the log file keeps both), show_config keeps it."""
    import logging

    from mmseg.evaluation.metrics import IoUMetric
    metric = IoUMetric()
    metric.dataset_meta = dict(classes=('sky', 'road'))
    metric.results = [(torch.tensor([5., 2.]), torch.tensor([6., 3.]), torch.tensor([5., 2.]),
                       torch.tensor([6., 3.]))]  # intersect, union, pred, label areas
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger('class_table_run')
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    original = MMLogger.get_current_instance
    MMLogger.get_current_instance = staticmethod(lambda: logger)
    try:
        summary = metric.compute_metrics(metric.results)
    finally:
        MMLogger.get_current_instance = original
        logger.removeHandler(handler)
    assert summary['mIoU'] > 0 and len(records) == 2  # the heading and the table
    assert '| Class |' in records[1].getMessage() and 'road' in records[1].getMessage()
    assert [console.ConsoleFilter().filter(r) for r in records] == [False, False]
    assert all(console.ConsoleFilter(show_config=True).filter(r) for r in records)
    progress = logging.makeLogRecord(dict(msg='Iter(val) [2/2]  mIoU: 71.4', args=()))
    assert console.ConsoleFilter().filter(progress)
