"""A study's plan, fixed before its runs, and the reading rules every sentence about its
results follows.

A plan is a Markdown file under docs/plans/ (committed before the first run it governs and
never edited afterwards: a change is a new file that says why). Its one ```json block names,
in the words of the report's tables:
- `primary`: the primary endpoints, each {name, table, column, a, b} (row a minus row b);
- `columns` and `rows`: the planned measures and rows; a comparison on any other column or
  row is exploratory (stated, never given a verdict, outside Holm's family);
- `equivalence`: optional margins {table, column, a, b, margin}; only these comparisons may
  be read as equal, by two one-sided tests (`paired_stats.tost`).
The report states the plan's path and sha256 (`plan_line`) and `check_report` holds it to the
plan. `check_reading` holds free text (docs/reproduce.md, a report's notes) to the rules:
no sentence of equality from an interval that includes 0 unless it names an equivalence
margin; no direction read from a comparison Holm did not reach ("not tested"); a measure
added after the runs is called exploratory.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the checkout: docs/plans/ lies below it
Key = tuple[str, str, str, str]  # (table, column, row a, row b) as the report shows them
PLAN_LINE = re.compile(r'^Plan: `(?P<path>[^`]+)`, sha256 (?P<sha>[0-9a-f]{64})\.$', re.M)


@dataclass(frozen=True)
class Plan:
    """A parsed plan file (see the module's docstring)."""
    path: str
    sha256: str
    primary: dict[Key, str]
    columns: frozenset[str]
    rows: frozenset[str]
    margins: dict[Key, float]
    design: dict

    def role(self, key: Key) -> str:
        """'P1', ... for a primary endpoint; 'secondary' for a planned column between planned
        rows; 'exploratory' otherwise."""
        if key in self.primary:
            return self.primary[key]
        planned = key[1] in self.columns and {key[2], key[3]} <= self.rows
        return 'secondary' if planned else 'exploratory'


def read_plan(path: str | Path) -> Plan:
    """The plan in `path`; a ValueError naming the file and the key when it is malformed."""
    path = Path(path)
    raw = path.read_bytes()
    blocks = re.findall(r'```json\n(.*?)\n```', raw.decode('utf-8'), re.S)
    if len(blocks) != 1:
        raise ValueError(f'{path}: a plan holds exactly one ```json block, found {len(blocks)}')
    try:
        data = json.loads(blocks[0])
    except json.JSONDecodeError as err:
        raise ValueError(f'{path}: its ```json block is not JSON ({err})') from None

    def key(entry: dict, what: str) -> Key:
        missing = [k for k in ('table', 'column', 'a', 'b') if not isinstance(entry.get(k), str)]
        if missing:
            raise ValueError(f'{path}: {what} entry {entry!r} lacks the string key(s) {missing}')
        return entry['table'], entry['column'], entry['a'], entry['b']
    for field in ('primary', 'columns', 'rows'):
        if not isinstance(data.get(field), list):
            raise ValueError(f'{path}: key {field!r} must be a list')
    primary = {key(e, 'primary'): str(e.get('name', '')) for e in data['primary']}
    if not all(re.fullmatch(r'P\d+', n) for n in primary.values()):
        raise ValueError(f'{path}: every primary endpoint needs a name P1, P2, ...')
    margins = {}
    for e in data.get('equivalence', []):
        if not isinstance(e.get('margin'), (int, float)) or not e['margin'] > 0:
            raise ValueError(f'{path}: equivalence entry {e!r} needs a positive "margin"')
        margins[key(e, 'equivalence')] = float(e['margin'])
    return Plan(str(path), hashlib.sha256(raw).hexdigest(), primary,
                frozenset(data['columns']), frozenset(data['rows']), margins,
                {k: v for k, v in data.items() if k not in ('primary', 'equivalence')})


def plan_line(plan: Plan, root: str | Path = '.') -> str:
    """The report's line naming its plan (path relative to `root` where it lies below it)."""
    path, root = Path(plan.path).resolve(), Path(root).resolve()
    shown = path.relative_to(root) if path.is_relative_to(root) else path
    return f'Plan: `{shown}`, sha256 {plan.sha256}.'


def plan_problems(text: str, plan: Plan) -> list[str]:
    """Where a report departs from its plan: the plan line's hash, and each conclusion line's
    role and margin (study_report.check_report gives the lines)."""
    m = PLAN_LINE.search(text)
    if not m:
        return [f'the report names no plan (a line "Plan: `<file>`, sha256 <hex>.")']
    if m.group('sha') != plan.sha256:
        return [f'the report was written under {m.group("path")} with sha256 {m.group("sha")}, '
                f'not {plan.path} ({plan.sha256}): the plan changed after the runs']
    return []


# --- reading rules for free text -------------------------------------------------------------
EQUALITY = re.compile(r'\b(match(es|ed)?|the same|equal(s|ly)?|not seen|no difference|'
                      r'within noise|buys no|does not separate|on par|indistinguishable|'
                      r'as good as)\b', re.I)
DIRECTION = re.compile(r'\b(below|above|beats?|higher than|lower than|better|worse|'
                       r'outperforms?|exceeds?|ahead of|behind)\b', re.I)
INTERVAL = re.compile(r'\[\s*([+\-−]?\d+(?:\.\d+)?)\s*,\s*([+\-−]?\d+(?:\.\d+)?)\s*\]')


def sentences(text: str) -> list[str]:
    """Sentences of Markdown prose, paragraph by paragraph (code blocks, headings and table
    rows left out)."""
    text = re.sub(r'```.*?```', '', text, flags=re.S)
    out = []
    for para in re.split(r'\n\s*\n', text):
        prose = ' '.join(line.strip() for line in para.splitlines()
                         if line.strip() and not line.lstrip().startswith(('|', '#')))
        out += [s.strip() for s in re.split(r'(?<=[.!?;:])\s+(?=[A-Z*(\-])', prose)
                if s.strip()]
    return out


def includes_zero(sentence: str) -> bool:
    """Whether an interval [low, high] of the sentence includes 0."""
    def num(s):
        return float(s.replace('−', '-'))
    return any(num(lo) <= 0 <= num(hi) for lo, hi in INTERVAL.findall(sentence))


def check_reading(text: str, exploratory_terms: tuple[str, ...] = ()) -> list[str]:
    """Sentences of `text` that read more than their statistics say: equality from an interval
    that includes 0 without an equivalence margin; a direction where Holm did not reach the
    comparison ("not tested"); a measure named in `exploratory_terms` without the word
    exploratory. [] when every sentence keeps to the rules."""
    problems = []
    for s in sentences(text):
        if EQUALITY.search(s) and includes_zero(s) and not re.search(r'equivalen\w* margin', s):
            problems.append(f'equality read from an interval that includes 0 (state an '
                            f'equivalence margin in the plan and a two one-sided test): {s}')
        if 'not tested' in s and DIRECTION.search(s):
            problems.append(f'a direction read from a comparison Holm did not reach: {s}')
        if any(t in s for t in exploratory_terms) and 'exploratory' not in s.lower():
            problems.append(f'a measure added after the runs, not called exploratory: {s}')
    return problems
