"""Tables and conclusions of the study report (tools/study.py, `make demo`), written from the
numbers by one set of functions and read back by `check_report`, so that no sentence of a
report can contradict its tables.

- `cell`: 'mean ± std (v1, v2, v3)' of per-replicate values;
- `comparison`: a pair of table rows in one column, replicate by replicate (replicate i of
  each row is paired), with the direction the paper expects and its role: a primary endpoint
  fixed before the runs (P1, P2, P3) or a secondary comparison;
- `conclusion_lines`: one line per comparison, its verdict read from a t interval of the mean
  paired difference (peco_mm/tooling/paired_stats.py): the 95 % interval for a primary
  endpoint, the interval of its Holm step for a secondary one; no verdict below 5 replicates;
  `conclusion_block`: the primary endpoints' table (differences, 95 % interval, verdict)
  above those lines;
- `check_report`: parses every table and every conclusion line of a report, recomputes the
  lines (and the endpoints' table) from the table cells they name, and flags any other
  sentence among the conclusions;
  `write_checked` writes a report and exits non-zero when the check fails.
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from peco_mm.tooling.paired_stats import (MIN_REPLICATES, holm, sign_flip_p, t_interval, tost,
                                          verdict)

NA = '—'
NUMBER = r'-?(?:\d+(?:\.\d+)?|nan|inf)'  # as Python formats a float, non-finite ones too
CELL = re.compile(rf'^({NUMBER})(?: ± ({NUMBER}) \(([^)]*)\))?$')
CONCLUSION = re.compile(
    r'^- \[(?P<role>P\d+|secondary|exploratory)\|(?P<table>[^|\]]+)\|(?P<col>[^|\]]+)\|'
    r'(?P<a>[^|\]]+)\|(?P<b>[^|\]]+)\|paper: (?P<expect>higher|lower|no direction)'
    r'(?:\|equivalence margin ±(?P<margin>\d+(?:\.\d+)?))?\] per replicate .+$')
EXPECT_WORDS = {1: 'higher', -1: 'lower', 0: 'no direction'}
ENDPOINTS = 'Primary endpoints: paired differences'
CONCLUSIONS_INTRO = (
    'Each line compares two rows of a table in one column, replicate by replicate (row 1 minus '
    'row 2 as the table shows them; replicate i of every row is paired), and states the '
    'direction the paper expects (`paper: no direction` where it makes no claim). Its verdict '
    'is read from a t interval of the mean difference: "excludes 0 in the paper\'s direction", '
    '"includes 0" or "excludes 0 against the paper" ("excludes 0" without a direction). '
    'P1-P3 are the primary endpoints fixed before the runs (docs/reproduce.md), each read from '
    'its 95 % interval, with the exact sign-flip P as a check that does not assume normally '
    'distributed differences. Every other line is secondary: Holm\'s procedure over all of '
    'them reads step k of m from the interval at level 1 - 0.05 / (m - k + 1) and stops at the '
    f'first that includes 0. Below {MIN_REPLICATES} replicates no line gives a verdict. '
    'A line marked exploratory compares a column or row the plan did not name: it gets its '
    'interval and no verdict, outside Holm\'s family. Two rows are called equivalent only '
    'where the plan stated an equivalence margin, by two one-sided tests at 5 %.')


def cell(values: Sequence[float | None], digits: int = 1) -> str:
    """'mean ± std (v1, v2, ...)' over replicates (each value rounded to `digits`; mean and
    std nan when a value is not finite); one value alone; '—' when there is none."""
    vals = [round(float(v), digits) for v in values if v is not None]
    if not vals:
        return NA
    if len(vals) == 1:
        return f'{vals[0]:.{digits}f}'
    each = ', '.join(f'{v:.{digits}f}' for v in vals)
    mean, sd = ((statistics.mean(vals), statistics.stdev(vals))
                if all(map(math.isfinite, vals)) else (math.nan, math.nan))
    return f'{mean:.{digits}f} ± {sd:.{digits}f} ({each})'


def parse_cell(text: str) -> list[float]:
    """The per-replicate values of a `cell` (one value: [v]; '—': [])."""
    text = text.strip()
    if text == NA:
        return []
    m = CELL.match(text)
    if not m:
        raise ValueError(f'not a table cell of per-replicate values: {text!r}')
    if m.group(3) is None:
        return [float(m.group(1))]
    return [float(v) for v in m.group(3).split(',')]


@dataclass(frozen=True)
class Comparison:
    """Rows `a` and `b` of `table` in `column`: the paired differences a - b as the table shows
    them (rounded to `digits`), the sign the paper expects (+1 / -1; 0: none) and the role
    ('P1', 'P2', 'P3': a primary endpoint; 'secondary')."""
    table: str
    column: str
    a: str
    b: str
    diffs: tuple[float, ...]
    expect: int
    digits: int = 1
    role: str = 'secondary'
    margin: float | None = None  # the plan's equivalence margin, if it stated one

    @property
    def decidable(self) -> bool:
        """Enough finite paired differences for a verdict."""
        return len(self.diffs) >= MIN_REPLICATES and all(map(math.isfinite, self.diffs))


def comparison(table: str, column: str, a: str, b: str, a_vals: Sequence[float],
               b_vals: Sequence[float], expect: int, digits: int = 1,
               role: str = 'secondary', margin: float | None = None) -> Comparison:
    """Rows `a` and `b` compared replicate by replicate, from the values as the table shows
    them (rounded to `digits`)."""
    if role not in ('secondary', 'exploratory') and not re.fullmatch(r'P\d+', role):
        raise ValueError(f"role={role!r}: expected 'P1', 'P2', ..., 'secondary' or "
                         "'exploratory'")
    if expect not in EXPECT_WORDS:
        raise ValueError(f'expect={expect!r}: expected one of {sorted(EXPECT_WORDS)}')
    av = [round(float(v), digits) for v in a_vals]
    bv = [round(float(v), digits) for v in b_vals]
    if len(av) != len(bv):
        raise ValueError(f'{table} / {column}: {len(av)} replicates of {a!r}, {len(bv)} of '
                         f'{b!r}; replicate i of each row must be paired')
    diffs = tuple(round(x - y, digits) + 0.0 for x, y in zip(av, bv))  # + 0.0: no '-0.0'
    return Comparison(table, column, a, b, diffs, expect, digits, role, margin)


def conclusion_block(comparisons: Sequence[Comparison], primary: dict | None = None) -> list[str]:
    """The Conclusions section's body: the table of the primary endpoints (when there are
    any), then one line per comparison (`conclusion_lines`)."""
    comparisons = with_roles(comparisons, primary)
    table = endpoint_table(comparisons)
    return ([table, ''] if table else []) + conclusion_lines(comparisons)


def with_roles(comparisons: Sequence[Comparison], primary: dict | None) -> list[Comparison]:
    """`primary`: {(table, column, row a, row b): 'P1', ...}, the endpoints fixed before the
    runs, each of which must be among the comparisons; they take that role, the others keep
    theirs."""
    primary = primary or {}
    keys = {(c.table, c.column, c.a, c.b) for c in comparisons}
    missing = [f'{r}: {k}' for k, r in primary.items() if k not in keys]
    if missing:
        raise ValueError(f'primary endpoints that no comparison states: {missing}')
    return [replace(c, role=primary.get((c.table, c.column, c.a, c.b), c.role))
            for c in comparisons]


def conclusion_lines(comparisons: Sequence[Comparison], primary: dict | None = None) -> list[str]:
    """One line per comparison, in their order (`primary`: as `with_roles`). Holm's procedure
    runs over every decidable secondary comparison of the list (the report's family)."""
    comparisons = with_roles(comparisons, primary)
    family = [i for i, c in enumerate(comparisons) if c.role == 'secondary' and c.decidable]
    steps = holm([t_interval(comparisons[i].diffs).p for i in family])
    holm_of = {i: (step, len(family)) for i, step in zip(family, steps)}
    return [conclusion_line(c, *holm_of.get(i, (None, 0))) for i, c in enumerate(comparisons)]


def endpoint_table(comparisons: Sequence[Comparison]) -> str:
    """The primary endpoints as a `markdown_table`: the paired differences as a `cell`, the 95 %
    interval and the verdict of each; '' when the comparisons have none."""
    rows = {c.role: [f'{c.column}: {c.a} minus {c.b}', EXPECT_WORDS[c.expect],
                     cell(c.diffs, c.digits), interval_text(c) or NA,
                     no_verdict(c) or verdict(c.diffs, c.expect)]
            for c in sorted(comparisons, key=lambda c: c.role)
            if c.role not in ('secondary', 'exploratory')}
    return markdown_table(ENDPOINTS, ['row 1 minus row 2', 'paper', 'difference per replicate',
                                      '95 % CI', 'verdict'], rows) if rows else ''


def interval_text(c: Comparison, level: float = 0.95) -> str:
    """'[low, high]' of the comparison's t interval at `level`, one digit more than the table
    shows; '' below 2 finite values."""
    if len(c.diffs) < 2 or not all(map(math.isfinite, c.diffs)):
        return ''
    iv = t_interval(c.diffs, level)
    return f'[{iv.low:+.{c.digits + 1}f}, {iv.high:+.{c.digits + 1}f}]'


def no_verdict(c: Comparison) -> str:
    """Why a comparison gets no verdict ('' when it gets one)."""
    n = len(c.diffs)
    if not all(map(math.isfinite, c.diffs)):
        return 'a value is not finite, no verdict'
    if n == 0:
        return 'no values'
    if n < MIN_REPLICATES:
        return f'too few replicates for a verdict ({n}; {MIN_REPLICATES} needed)'
    return ''


def conclusion_line(c: Comparison, step=None, family: int = 0) -> str:
    """The line of one comparison (`step`: its HolmStep among `family` secondary ones)."""
    margin = f'|equivalence margin ±{c.margin:g}' if c.margin else ''
    head = (f'- [{c.role}|{c.table}|{c.column}|{c.a}|{c.b}|paper: {EXPECT_WORDS[c.expect]}'
            f'{margin}] per replicate '
            f'{", ".join(f"{v:+.{c.digits}f}" for v in c.diffs) or NA}')
    stats = (f'mean {statistics.mean(c.diffs):+.{c.digits + 1}f}'
             if c.diffs and all(map(math.isfinite, c.diffs)) else '')
    stats += f', 95 % CI {interval_text(c)}' if interval_text(c) else ''
    if no_verdict(c):
        return ': '.join(filter(None, (head, stats, no_verdict(c))))
    if c.role == 'exploratory':
        return f'{head}: {stats}; exploratory (not in the plan), no verdict'
    return conclusion_verdict(c, head, stats, step, family) + equivalence_text(c)


def equivalence_text(c: Comparison) -> str:
    """'; equivalence within ±m (two one-sided tests, P = ...): shown | not shown' where the
    plan stated a margin for the comparison ('' otherwise)."""
    if not c.margin:
        return ''
    p, shown = tost(c.diffs, c.margin)
    return (f'; equivalence within ±{c.margin:g} (two one-sided tests, P {p_text(p)}): '
            f'{"shown" if shown else "not shown"}')


def conclusion_verdict(c: Comparison, head: str, stats: str, step, family: int) -> str:
    """The line of a decidable primary or secondary comparison."""
    if c.role != 'secondary':
        return (f'{head}: {stats}, sign-flip P {p_text(sign_flip_p(c.diffs))}: '
                f'{verdict(c.diffs, c.expect)}')
    where = f'Holm step {step.step} of {family}'
    if not step.tested:
        return f'{head}: {stats}; {where}: not tested (Holm stopped at step {step.stopped_at})'
    return (f'{head}: {stats}; {where}: {100 * step.level:.2f} % CI '
            f'{interval_text(c, step.level)}, adjusted P {p_text(step.adjusted_p)}: '
            f'{verdict(c.diffs, c.expect, step.level)}')


def p_text(p: float) -> str:
    """'= 0.021' or '< 0.001'."""
    return '< 0.001' if p < 0.001 else f'= {p:.3f}'


def markdown_table(title: str, columns: Sequence[str], rows: dict[str, Sequence[str]]) -> str:
    """A Markdown table whose first line is `**<title>**`; rows {label: cells}."""
    lines = [f'**{title}**', '', '| | ' + ' | '.join(columns) + ' |',
             '|---' * (len(columns) + 1) + '|']
    lines += [f'| {label} | ' + ' | '.join(cells) + ' |' for label, cells in rows.items()]
    return '\n'.join(lines)


def parse_tables(text: str) -> dict[str, dict[str, dict[str, str]]]:
    """{title: {row label: {column: cell}}} of every `markdown_table` in a report."""
    tables: dict[str, dict[str, dict[str, str]]] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.fullmatch(r'\*\*(.+)\*\*', line.strip())
        if not m or i + 2 >= len(lines) or not lines[i + 2].startswith('| |'):
            continue
        cols = [c.strip() for c in lines[i + 2].strip().strip('|').split('|')][1:]
        rows = {}
        for row in lines[i + 4:]:
            if not row.startswith('|'):
                break
            cells = [c.strip() for c in row.strip().strip('|').split('|')]
            rows[cells[0]] = dict(zip(cols, cells[1:]))
        tables[m.group(1)] = rows
    return tables


def read_comparison(m: re.Match, tables: dict) -> Comparison:
    """The comparison a parsed conclusion line names, from its two table cells (the digits
    those cells show)."""
    t, col, a, b = (m.group(k) for k in ('table', 'col', 'a', 'b'))
    a_cell, b_cell = tables[t][a][col], tables[t][b][col]
    shown = re.findall(r'-?\d+(?:\.\d+)?', a_cell)  # none when every value is nan
    digits = max((len(v.split('.')[1]) if '.' in v else 0 for v in shown), default=1)
    expect = {w: k for k, w in EXPECT_WORDS.items()}[m.group('expect')]
    margin = float(m.group('margin')) if m.group('margin') else None
    return comparison(t, col, a, b, parse_cell(a_cell), parse_cell(b_cell), expect, digits,
                      m.group('role'), margin)


def check_report(text: str, plan=None) -> list[str]:
    """Contradictions between the conclusions of a report and its tables: every conclusion
    line is recomputed from the two cells it names, its role and the paper's direction it
    states (its differences, interval, Holm step and verdict; Holm over all its secondary
    lines), a primary endpoint may be stated once, the primary endpoints' table is the one
    their lines give, and the Conclusions section holds no other sentence than its
    introduction. With `plan` (study_plan.Plan), also: the report names that plan's file and
    hash, and each line has the role and the equivalence margin the plan gives it.
    [] for a consistent report."""
    tables = parse_tables(text)
    problems, found = [], []
    for line in text.splitlines():
        if not line.startswith('- ['):
            continue
        m = CONCLUSION.match(line)
        if not m:
            problems.append(f'unparsable conclusion: {line}')
            continue
        try:
            found.append((line, read_comparison(m, tables)))
        except (KeyError, ValueError) as err:
            problems.append(f'{line}: its cells are not in the tables ({err})')
    for (line, _), want in zip(found, conclusion_lines([c for _, c in found])):
        if want != line:
            problems.append(f'says:     {line}\n  tables give: {want}')
    roles = [c.role for _, c in found if c.role not in ('secondary', 'exploratory')]
    problems += [f'primary endpoint {r} is stated {roles.count(r)} times'
                 for r in sorted(set(roles)) if roles.count(r) > 1]
    table = endpoint_table([c for _, c in found])
    if table and table not in text:
        problems.append(f'the table of the primary endpoints is not, as their lines give it:\n'
                        f'{table}')
    return problems + stray_sentences(text, table) + (
        against_plan(text, [c for _, c in found], plan) if plan is not None else [])


def against_plan(text: str, comparisons: Sequence[Comparison], plan) -> list[str]:
    """Where the report departs from `plan`: its plan line, and each comparison's role and
    margin."""
    from peco_mm.tooling.study_plan import plan_problems
    problems = plan_problems(text, plan)
    for c in comparisons:
        key = (c.table, c.column, c.a, c.b)
        if c.role != plan.role(key):
            problems.append(f'{c.column}: {c.a} minus {c.b} is read as {c.role}; the plan makes '
                            f'it {plan.role(key)}')
        if c.margin != plan.margins.get(key):
            problems.append(f'{c.column}: {c.a} minus {c.b} has equivalence margin {c.margin}; '
                            f'the plan states {plan.margins.get(key)}')
    stated = {(c.table, c.column, c.a, c.b) for c in comparisons}
    problems += [f'primary endpoint {name} of the plan is not in the report: {key}'
                 for key, name in plan.primary.items() if key not in stated]
    return problems


def apply_plan(comparisons: Sequence[Comparison], plan) -> list[Comparison]:
    """Each comparison with the role and margin `plan` gives it."""
    return [replace(c, role=plan.role(k), margin=plan.margins.get(k))
            for c, k in ((c, (c.table, c.column, c.a, c.b)) for c in comparisons)]


def stray_sentences(text: str, table: str = '') -> list[str]:
    """Lines of the '## Conclusions' section that are neither a conclusion line, nor its
    introduction, nor in `table` (the primary endpoints' table): sentences no interval
    wrote."""
    section = text.split('\n## Conclusions\n', 1)[1:]
    body = section[0].split('\n## ', 1)[0] if section else ''
    if table:
        body = body.replace(table, '')
    return [f'a sentence among the conclusions that no interval wrote: {line}'
            for line in body.splitlines()
            if line.strip() and line != CONCLUSIONS_INTRO and not line.startswith('- [')]


def write_checked(path: str | Path, text: str, plan=None) -> Path:
    """Write the report `text` to `path`, then check it: exits (status 1) naming the file and
    each contradiction when a sentence disagrees with its numbers."""
    path = Path(path)
    path.write_text(text)
    problems = check_report(text, plan)
    if problems:
        raise SystemExit(f'{path}: {len(problems)} conclusion(s) disagree with the report\'s '
                         'numbers:\n' + '\n'.join(problems))
    return path
