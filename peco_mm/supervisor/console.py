"""What a run prints on the console: progress and problems, not the whole config.

mmengine's Runner logs the full config, the hook table and the system environment (PyTorch's
build details) at the start of every run; they go to the run's log file (and the config to
WORK_DIR/<config name>.py), while the console gets the environment and the runtime settings
in a line each, unless `show_config=True` (`tools/train.py --show-config`). mmengine's own
deprecation notices about its file client (which the hosts still use) stay in the log file.
Messages that are expected, and would otherwise worry, are said once with the reason:

- mmengine's "Reach the end of the dataloader, it will be restarted ..." (an iteration-based
  loop over a finite sampler starts another pass over the data) is logged once per run, as one
  line saying so;
- notes that hold for the whole process (e.g. "No CUDA: training in fp32") reach the console
  from the first run of a process only, and every run's log file (`log_once_per_process`);
- mmseg's per-class table, printed at every evaluation, goes to the log file only (the
  console keeps the summary metrics; `show_config=True` prints the table too), as do the
  launcher's list of the keys it changed and mmengine's "all SyncBatchNorm (SyncBN) layers
  ... will be reverted" of every one-process run;
- pycocotools' progress lines ("loading annotations into memory...", "index created!", ...)
  are dropped (`quiet_stdout`); so are the hosts' warnings about their own code, and every
  Python warning on ranks other than 0, which repeat rank 0's (`quiet_ranks`).
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import time
import warnings

CONSOLE_ONLY_IN_FILE = ('Config:\n', 'Hooks will be executed in the following order',
                        '"FileClient" will be deprecated', '"HardDiskBackend" is the alias',
                        'per class results:',  # mmseg IoUMetric's heading of the class table
                        'The launcher changed ',  # the block of config_steps' changes
                        # mmengine's Runner says it in every one-process run, SyncBN or not
                        'Distributed training is not used, all SyncBatchNorm')
# pycocotools' progress lines (each COCO index, each evaluation, on every rank)
COCO_CHATTER = ('loading annotations into memory...', 'Done (t=', 'creating index...',
                'index created!', 'Loading and preparing results...', 'DONE (t=',
                'Running per image evaluation...', 'Evaluate annotation type',
                'Accumulating evaluation results...')
ENV_BLOCK = 'System environment:'
# the one-line summary: these keys and the 'GPU 0,1: <name>' lines
ENV_KEYS = ('Python', 'PyTorch', 'CUDA available', 'MMEngine')
RESTART = 'Reach the end of the dataloader'
RESTART_NOTE = ('The training data loader starts another pass over its data (an '
                'iteration-based loop over a finite sampler; expected, logged once per run).')
_SAID: set[str] = set()  # notes logged by an earlier run of this process


class ConsoleFilter(logging.Filter):
    """On the console handler: drop records marked `extra={'console': False}` and, unless
    show_config, the config dump, the hook table and mmseg's per-class table of every
    evaluation (150 rows on ADE20K; the log file keeps all of them)."""

    def __init__(self, show_config: bool = False) -> None:
        super().__init__()
        self.show_config = show_config

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, 'console', True) is False:
            return False
        msg = record.msg
        return self.show_config or not isinstance(msg, str) or not (
            msg.startswith(CONSOLE_ONLY_IN_FILE) or is_class_table(msg))


def is_class_table(msg: str) -> bool:
    """mmseg's per-class results (a PrettyTable whose first column is 'Class')."""
    return msg.lstrip('\n').startswith('+-') and msg.split('\n|', 1)[-1].lstrip().startswith(
        'Class ')


class ShortEnvFormatter(logging.Formatter):
    """On the console handler: the system-environment block as one line (the log file keeps
    the block); every other record as the handler's own formatter writes it."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        msg = record.msg
        if isinstance(msg, str) and ENV_BLOCK in msg:
            record = logging.makeLogRecord(record.__dict__)  # the file handler keeps the block
            record.msg = short_env(msg)
        return self.inner.format(record)


def short_env(block: str) -> str:
    """mmengine's environment block -> two lines, 'System environment: Python 3.11.7, ...' and
    'Runtime environment: seed: 0, ..., Distributed: False, GPU number: 1' (mmengine's
    'Distributed training' in a test run too)."""
    system, _, runtime = block.partition('Runtime environment:')
    items = []
    for line in system.splitlines():
        key, _, value = line.strip().partition(': ')
        if line.startswith('    ') and (key in ENV_KEYS or key.startswith('GPU ')):
            items.append(f"{key} {value.split(' (')[0]}")
    settings = [line.strip().replace('Distributed training:', 'Distributed:')  # (a test too)
                for line in runtime.splitlines() if line.startswith('    ')]
    return (f"System environment: {', '.join(items)} (all of it in the log file)\n"
            f"Runtime environment: {', '.join(settings)}")


class ExpectedMessageFilter(logging.Filter):
    """On the logger: mmengine's data-loader restart warning becomes one explained line, once."""

    def __init__(self) -> None:
        super().__init__()
        self.restarts = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith(RESTART):
            self.restarts += 1
            if self.restarts > 1:
                return False
            record.msg, record.args = RESTART_NOTE, ()
            record.levelno, record.levelname = logging.INFO, 'INFO'
        return True


def quiet(logger: logging.Logger, show_config: bool = False) -> logging.Logger:
    """Install the filters on an MMLogger (idempotent)."""
    if not any(isinstance(f, ExpectedMessageFilter) for f in logger.filters):
        logger.addFilter(ExpectedMessageFilter())
    for handler in logger.handlers:
        if (type(handler) is logging.StreamHandler
                and not any(isinstance(f, ConsoleFilter) for f in handler.filters)):
            handler.addFilter(ConsoleFilter(show_config))
            if not show_config:
                handler.setFormatter(ShortEnvFormatter(handler.formatter))
    return logger


class QuietConsole:
    """Mixin for a runner class: the console filters (`quiet`) go on the run's logger as soon
    as mmengine builds it, before the runner logs its environment and config, through
    mmengine's public methods: `build_logger` (Runner), `build_strategy` (FlexibleRunner, whose
    strategy builds the logger)."""
    show_config = False

    def build_logger(self, *args, **kwargs):
        return quiet(super().build_logger(*args, **kwargs), self.show_config)

    def build_strategy(self, *args, **kwargs):
        strategy = super().build_strategy(*args, **kwargs)
        quiet(strategy.logger, self.show_config)
        return strategy


def quiet_runner_class(runner_cls: type, show_config: bool = False) -> type:
    """`runner_cls` (mmengine's Runner, FlexibleRunner, a host's) with `QuietConsole`, under
    the same name."""
    return type(runner_cls.__name__, (QuietConsole, runner_cls),
                dict(show_config=show_config, __module__=__name__,
                     __doc__=f'{runner_cls.__name__} with the console filters of '
                             f'{__name__}.'))


def log_once_per_process(logger: logging.Logger, note: str | None,
                         level: int = logging.WARNING) -> None:
    """Log a note about the machine (e.g. "No CUDA: training in fp32") in every run's log file,
    and on the console for the first run of the process only."""
    if not note:
        return
    first = note not in _SAID
    _SAID.add(note)
    logger.log(level, note, extra={} if first else {'console': False})


# host warnings about the hosts' own code, which no config change silences (on every rank)
HOST_INTERNALS = ('Setting MKL_NUM_THREADS environment variable',  # mmengine, every run
                  '``build_loss`` would be deprecated',  # mmseg's heads call it themselves
                  '`reduce_zero_label` will be deprecated',  # mmseg's LoadAnnotations
                  '`broadcast_buffers` is deprecated')  # the launcher's CPU DDP wrapper


def quiet_ranks(launcher: str) -> None:
    """Python warnings about the hosts' internals (`HOST_INTERNALS`) are dropped; under a
    distributed launcher, so is every warning on ranks other than 0 (each rank would print
    the same host and torch warnings; rank 0 prints them once)."""
    for text in HOST_INTERNALS:
        warnings.filterwarnings('ignore', message=f'.*{re.escape(text)}')
    if launcher != 'none' and os.environ.get('RANK', '0') != '0':
        warnings.simplefilter('ignore')


class ChatterFilter:
    """A text stream that passes everything on but pycocotools' progress lines."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.line = ''  # a line being written (print writes the text, then the newline)

    def write(self, text: str) -> int:
        self.line += text
        while '\n' in self.line:
            line, _, self.line = self.line.partition('\n')
            if not line.startswith(COCO_CHATTER):
                self.inner.write(line + '\n')
        if self.line and not any(c.startswith(self.line) or self.line.startswith(c)
                                 for c in COCO_CHATTER):
            self.inner.write(self.line)  # not the start of a progress line: pass it now
            self.line = ''
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def __getattr__(self, name):
        return getattr(self.inner, name)


@contextlib.contextmanager
def quiet_stdout():
    """sys.stdout without pycocotools' progress lines, for the duration of a run."""
    if isinstance(sys.stdout, ChatterFilter):
        yield
        return
    with contextlib.redirect_stdout(ChatterFilter(sys.stdout)):
        yield


# ---- tools that train several runs in one process (tools/study.py, `make demo`) -------------
def fmt_time(seconds: float) -> str:
    return f'{int(seconds // 60)}m{int(seconds % 60):02d}s'


class RunPlan:
    """The console of a tool that trains several runs in one process: one line per run,
    '[elapsed] run k of N: what (ETA ...)'. Each run has a relative cost (e.g. iterations x
    seconds per iteration of its stage); the ETA is the cost left times the seconds per cost
    unit of the runs trained so far (none yet: 'ETA after the first run')."""

    def __init__(self, runs: list[tuple[str, str, float]]) -> None:
        self.runs = runs  # [(key, description, cost)] in the order they run
        self.cost = {key: c for key, _, c in runs}
        self.desc = {key: d for key, d, _ in runs}
        self.t0 = time.time()
        self.k = 0
        self.done_cost = self.done_seconds = 0.0

    def start(self, key: str, note: str = '') -> None:
        self.k += 1
        left = sum(c for _, _, c in self.runs[self.k - 1:])
        eta = (f'ETA {fmt_time(left * self.done_seconds / self.done_cost)}'
               if self.done_cost else 'ETA after the first run')
        print(f'[{fmt_time(time.time() - self.t0)}] run {self.k} of {len(self.runs)}: '
              f'{self.desc[key]}{note} ({eta})', flush=True)

    def finish(self, key: str, seconds: float) -> None:
        self.done_seconds += seconds
        self.done_cost += self.cost[key]


@contextlib.contextmanager
def output_to(log):
    """A run's console output (its logs, progress lines, warnings) appended to the file `log`;
    on an error, the file's last 30 lines go to stderr before the error goes on. The file
    stays open: the run's logger keeps its handler on it after the run."""
    import sys
    import traceback
    import warnings
    f = open(log, 'a')  # noqa: SIM115 (see the docstring)
    try:
        with contextlib.redirect_stdout(f), contextlib.redirect_stderr(f), \
                warnings.catch_warnings():
            warnings.simplefilter('ignore')
            yield
    except BaseException:
        traceback.print_exc(file=f)
        f.flush()
        with open(log) as r:
            tail = r.read().splitlines()[-30:]
        print(f'run failed; the end of {log}:\n' + '\n'.join(tail), file=sys.stderr)
        raise
    f.flush()
