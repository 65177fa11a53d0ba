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
- `check_report`: parses every table and every conclusion line of a report, recomputes the
  lines from the table cells they name, and flags any other sentence among the conclusions;
  `write_checked` writes a report and exits non-zero when the check fails.
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from peco_mm.tooling.paired_stats import MIN_REPLICATES, holm, sign_flip_p, t_interval, verdict

NA = '—'
CELL = re.compile(r'^(-?\d+(?:\.\d+)?)(?: ± (\d+(?:\.\d+)?) \(([^)]*)\))?$')
CONCLUSION = re.compile(
    r'^- \[(?P<role>P\d+|secondary)\|(?P<table>[^|\]]+)\|(?P<col>[^|\]]+)\|(?P<a>[^|\]]+)\|'
    r'(?P<b>[^|\]]+)\|paper: (?P<expect>higher|lower|no direction)\] per replicate .+$')
EXPECT_WORDS = {1: 'higher', -1: 'lower', 0: 'no direction'}
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
    f'first that includes 0. Below {MIN_REPLICATES} replicates no line gives a verdict.')


def cell(values: Sequence[float | None], digits: int = 1) -> str:
    """'mean ± std (v1, v2, ...)' over replicates (each value rounded to `digits`); one value
    alone; '—' when there is none."""
    vals = [round(float(v), digits) for v in values if v is not None]
    if not vals:
        return NA
    if len(vals) == 1:
        return f'{vals[0]:.{digits}f}'
    each = ', '.join(f'{v:.{digits}f}' for v in vals)
    return f'{statistics.mean(vals):.{digits}f} ± {statistics.stdev(vals):.{digits}f} ({each})'


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

    @property
    def decidable(self) -> bool:
        """Enough finite paired differences for a verdict."""
        return len(self.diffs) >= MIN_REPLICATES and all(map(math.isfinite, self.diffs))


def comparison(table: str, column: str, a: str, b: str, a_vals: Sequence[float],
               b_vals: Sequence[float], expect: int, digits: int = 1,
               role: str = 'secondary') -> Comparison:
    """Rows `a` and `b` compared replicate by replicate, from the values as the table shows
    them (rounded to `digits`)."""
    if role != 'secondary' and not re.fullmatch(r'P\d+', role):
        raise ValueError(f"role={role!r}: expected 'P1', 'P2', ... or 'secondary'")
    if expect not in EXPECT_WORDS:
        raise ValueError(f'expect={expect!r}: expected one of {sorted(EXPECT_WORDS)}')
    av = [round(float(v), digits) for v in a_vals]
    bv = [round(float(v), digits) for v in b_vals]
    if len(av) != len(bv):
        raise ValueError(f'{table} / {column}: {len(av)} replicates of {a!r}, {len(bv)} of '
                         f'{b!r}; replicate i of each row must be paired')
    diffs = tuple(round(x - y, digits) + 0.0 for x, y in zip(av, bv))  # + 0.0: no '-0.0'
    return Comparison(table, column, a, b, diffs, expect, digits, role)


def conclusion_lines(comparisons: Sequence[Comparison], primary: dict | None = None) -> list[str]:
    """One line per comparison, in their order. `primary`: {(table, column, row a, row b):
    'P1', ...}, the endpoints fixed before the runs, each of which must be among the
    comparisons; they take that role, the others keep theirs. Holm's procedure runs over every
    decidable secondary comparison of the list (the report's family)."""
    roles = {(c.table, c.column, c.a, c.b): c.role for c in comparisons}
    missing = [f'{r}: {k}' for k, r in (primary or {}).items() if k not in roles]
    if missing:
        raise ValueError(f'primary endpoints that no comparison states: {missing}')
    comparisons = [replace(c, role=(primary or {}).get((c.table, c.column, c.a, c.b), c.role))
                   for c in comparisons]
    family = [i for i, c in enumerate(comparisons) if c.role == 'secondary' and c.decidable]
    steps = holm([t_interval(comparisons[i].diffs).p for i in family])
    holm_of = {i: (step, len(family)) for i, step in zip(family, steps)}
    return [conclusion_line(c, *holm_of.get(i, (None, 0))) for i, c in enumerate(comparisons)]


def conclusion_line(c: Comparison, step=None, family: int = 0) -> str:
    """The line of one comparison (`step`: its HolmStep among `family` secondary ones)."""
    d = c.digits + 1
    n = len(c.diffs)
    head = (f'- [{c.role}|{c.table}|{c.column}|{c.a}|{c.b}|paper: {EXPECT_WORDS[c.expect]}] '
            f'per replicate {", ".join(f"{v:+.{c.digits}f}" for v in c.diffs) or NA}')
    if not all(map(math.isfinite, c.diffs)):
        return f'{head}: a value is not finite, no verdict'
    if n == 0:
        return f'{head}: no values'
    stats = f'mean {statistics.mean(c.diffs):+.{d}f}'
    if n >= 2:
        iv = t_interval(c.diffs)
        stats += f', 95 % CI [{iv.low:+.{d}f}, {iv.high:+.{d}f}]'
    if n < MIN_REPLICATES:
        return (f'{head}: {stats}: too few replicates for a verdict ({n}; '
                f'{MIN_REPLICATES} needed)')
    if c.role != 'secondary':
        return (f'{head}: {stats}, sign-flip P {p_text(sign_flip_p(c.diffs))}: '
                f'{verdict(c.diffs, c.expect)}')
    where = f'Holm step {step.step} of {family}'
    if not step.tested:
        return f'{head}: {stats}; {where}: not tested (Holm stopped at step {step.stopped_at})'
    hv = t_interval(c.diffs, step.level)
    return (f'{head}: {stats}; {where}: {100 * step.level:.2f} % CI [{hv.low:+.{d}f}, '
            f'{hv.high:+.{d}f}], adjusted P {p_text(step.adjusted_p)}: '
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
    shown = re.findall(r'-?\d+(?:\.\d+)?', a_cell)
    if not shown:
        raise ValueError(f'the cell of {a!r} has no values: {a_cell!r}')
    digits = max(len(v.split('.')[1]) if '.' in v else 0 for v in shown)
    expect = {w: k for k, w in EXPECT_WORDS.items()}[m.group('expect')]
    return comparison(t, col, a, b, parse_cell(a_cell), parse_cell(b_cell), expect, digits,
                      m.group('role'))


def check_report(text: str) -> list[str]:
    """Contradictions between the conclusions of a report and its tables: every conclusion
    line is recomputed from the two cells it names, its role and the paper's direction it
    states (its differences, interval, Holm step and verdict; Holm over all its secondary
    lines), a primary endpoint may be stated once, and the Conclusions section holds no other
    sentence than its introduction. [] for a consistent report."""
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
    roles = [c.role for _, c in found if c.role != 'secondary']
    problems += [f'primary endpoint {r} is stated {roles.count(r)} times'
                 for r in sorted(set(roles)) if roles.count(r) > 1]
    return problems + stray_sentences(text)


def stray_sentences(text: str) -> list[str]:
    """Lines of the '## Conclusions' section that are neither a conclusion line nor its
    introduction: sentences no interval wrote."""
    section = text.split('\n## Conclusions\n', 1)[1:]
    body = section[0].split('\n## ', 1)[0] if section else ''
    return [f'a sentence among the conclusions that no interval wrote: {line}'
            for line in body.splitlines()
            if line.strip() and line != CONCLUSIONS_INTRO and not line.startswith('- [')]


def write_checked(path: str | Path, text: str) -> Path:
    """Write the report `text` to `path`, then check it: exits (status 1) naming the file and
    each contradiction when a sentence disagrees with its numbers."""
    path = Path(path)
    path.write_text(text)
    problems = check_report(text)
    if problems:
        raise SystemExit(f'{path}: {len(problems)} conclusion(s) disagree with the report\'s '
                         'numbers:\n' + '\n'.join(problems))
    return path
