"""A study's results as small files a repository can hold, and the docs' numbers generated
from them.

`tools/study.py --results DIR` (for example docs/results/<design>/) writes, besides the work
dir's report:
- `DIR/replicates/rep<r>.json` as soon as replicate r finishes: its metrics (no checkpoint,
  no path), so a run that stops part-way (a restarted machine) continues from the replicates
  already there, on this machine or another one that has the committed files;
- `DIR/report.md` and `DIR/endpoints.json` (each comparison's per-replicate values and role)
  once every replicate is there, and `DIR/run.json` (the command, the plan, the wall time,
  the machine and its load).
docs/reproduce.md shows a run's primary endpoints between `<!-- results: DIR -->` and
`<!-- /results -->`; `summary_table` writes that block from DIR/endpoints.json alone, and a test
fails when the docs and the committed results differ.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from peco_mm.tooling.tool_runs import plain_number

BLOCK = re.compile(r'<!-- results: (?P<dir>\S+) -->\n(?P<body>.*?)<!-- /results -->', re.S)
DROP = ('ckpt', 'config', 'pecovit')  # paths into a work dir: meaningless elsewhere


def small(value):
    """`value` (a replicate's results) without paths, tuple keys joined by '/'."""
    if isinstance(value, dict):
        return {('/'.join(k) if isinstance(k, tuple) else str(k)): small(v)
                for k, v in value.items() if k not in DROP}
    if isinstance(value, (list, tuple)):
        return [small(v) for v in value]
    return value


def from_small(record: dict) -> dict:
    """A replicate's results as `run_replicate` gives them, from its small record (the
    downstream keys back to (task, init) tuples)."""
    out = dict(record)
    out['downstream'] = {tuple(k.split('/', 1)): v for k, v in record['downstream'].items()}
    return out


def replicate_file(results: Path, r: int) -> Path:
    return Path(results) / 'replicates' / f'rep{r}.json'


def save_replicate(results: Path, r: int, res: dict) -> Path:
    """Write replicate r's small record (at once, so that a later call can continue)."""
    path = replicate_file(results, r)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(small(res), indent=1, sort_keys=True, default=plain_number) + '\n')
    return path


def load_replicate(results: Path, r: int) -> dict | None:
    """Replicate r's results from its committed record, or None when there is none."""
    path = replicate_file(results, r)
    if not path.is_file():
        return None
    try:
        return from_small(json.loads(path.read_text()))
    except (ValueError, KeyError, AttributeError) as err:
        raise ValueError(f'{path}: not a replicate record of tools/study.py ({err})') from None


def summary_table(results: str | Path) -> str:
    """The primary endpoints of a committed run (its endpoints.json): each with its
    per-replicate differences, mean, 95 % interval, exact sign-flip P, verdict and the
    smallest difference the replicates detect at 80 % power."""
    import statistics

    from peco_mm.tooling.paired_stats import detectable_difference, sign_flip_p, verdict
    from peco_mm.tooling.study_report import (cell, comparison, interval_text, no_verdict,
                                              p_text)
    data = json.loads((Path(results) / 'endpoints.json').read_text())
    lines = ['| endpoint | row 1 minus row 2 | difference per replicate | 95 % CI | sign-flip P | '
             'verdict | detectable at 80 % power |', '|---|---|---|---|---|---|---|']
    for e in data['comparisons']:
        if not re.fullmatch(r'P\d+', e['name']):
            continue
        c = comparison(e['table'], e['column'], e['a'], e['b'], e['a_values'], e['b_values'],
                       e['expect'], e['digits'], e['name'])
        sd = statistics.stdev(c.diffs) if len(c.diffs) > 1 else 0.0
        power = f'{detectable_difference(sd, len(c.diffs)):.1f}' if sd > 0 else '—'
        lines.append(f'| {c.role} | {c.column}: {c.a} minus {c.b} | {cell(c.diffs, c.digits)} | '
                     f'{interval_text(c) or "—"} | {p_text(sign_flip_p(c.diffs))} | '
                     f'{no_verdict(c) or verdict(c.diffs, c.expect)} | {power} |')
    return '\n'.join(lines) + '\n'


def docs_mismatches(text: str, root: str | Path) -> list[str]:
    """Each results block of `text` whose body is not what its committed results give."""
    out = []
    for m in BLOCK.finditer(text):
        want = summary_table(Path(root) / m.group('dir'))
        if m.group('body') != want:
            out.append(f'the block of {m.group("dir")} differs from its results:\n{want}')
    return out


def publish(study, results: str | Path, argv: list[str], load: dict) -> Path:
    """Copy the checked report, its endpoints and its figure into `results` and write
    run.json: the command, the plan, the wall time, the machine and its load."""
    import datetime
    import platform
    import shutil
    import subprocess
    import time

    from peco_mm.tooling.study_plan import REPO, plan_line
    results = Path(results)
    results.mkdir(parents=True, exist_ok=True)
    for name in ('report.md', 'endpoints.json', 'report_files/reconstructions.png'):
        if (study.wd / name).is_file():
            (results / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(study.wd / name, results / name)
    commit = subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    cpu = next((line.split(':', 1)[1].strip() for line in
                Path('/proc/cpuinfo').read_text().splitlines()
                if line.startswith('model name')), platform.processor()) \
        if Path('/proc/cpuinfo').is_file() else platform.processor()
    run = dict(command=['python', 'tools/study.py', *argv], commit=commit,
               date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
               seconds_this_call=round(time.time() - study.t0, 1), cpu=cpu,
               cores=load['cpus'], load_start=load['start'][0], load_end=load['end'][0],
               plan=None if study.prereg is None else plan_line(study.prereg, REPO))
    (results / 'run.json').write_text(json.dumps(run, indent=1) + '\n')
    return results
