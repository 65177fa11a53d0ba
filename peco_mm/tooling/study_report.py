"""Tables and conclusions of the study report (tools/study.py, `make demo`), written from the
numbers by one set of functions and read back by `check_report`, so that no sentence of a
report can contradict its tables.

- `cell`: 'mean ± std (v1, v2, v3)' of per-seed values;
- `comparison`: one conclusion line for a pair of table rows in one column, with the
  direction the paper expects: the per-seed differences, how many seeds agree on the sign,
  and whether the sign is consistent and, if so, for or against the paper;
- `check_report`: parses every table and every conclusion line of a report and recomputes
  each conclusion from the table cells it names; returns the list of contradictions.
"""
from __future__ import annotations

import re
import statistics
from typing import Sequence

NA = '—'
CELL = re.compile(r'^(-?\d+(?:\.\d+)?)(?: ± (\d+(?:\.\d+)?) \(([^)]*)\))?$')
CONCLUSION = re.compile(
    r'^- \[(?P<table>[^|\]]+)\|(?P<col>[^|\]]+)\|(?P<a>[^|\]]+)\|(?P<b>[^|\]]+)\|'
    r'paper: (?P<expect>higher|lower|no direction)\] per seed (?P<diffs>[^:]+): (?P<verdict>.+)$')
EXPECT_WORDS = {1: 'higher', -1: 'lower', 0: 'no direction'}


def cell(values: Sequence[float | None], digits: int = 1) -> str:
    """'mean ± std (v1, v2, ...)' over seeds (each value rounded to `digits`); one value
    alone; '—' when there is none."""
    vals = [round(float(v), digits) for v in values if v is not None]
    if not vals:
        return NA
    if len(vals) == 1:
        return f'{vals[0]:.{digits}f}'
    each = ', '.join(f'{v:.{digits}f}' for v in vals)
    return f'{statistics.mean(vals):.{digits}f} ± {statistics.stdev(vals):.{digits}f} ({each})'


def parse_cell(text: str) -> list[float]:
    """The per-seed values of a `cell` (one value: [v]; '—': [])."""
    text = text.strip()
    if text == NA:
        return []
    m = CELL.match(text)
    if not m:
        raise ValueError(f'not a table cell of per-seed values: {text!r}')
    if m.group(3) is None:
        return [float(m.group(1))]
    return [float(v) for v in m.group(3).split(',')]


def verdict(diffs: Sequence[float], expect: int, digits: int = 1) -> str:
    """The conclusion's words for per-seed differences a - b (as shown, rounded) when the
    paper expects a - b to have sign `expect` (+1 / -1; 0: no expectation)."""
    n = len(diffs)
    pos = sum(d > 0 for d in diffs)
    neg = sum(d < 0 for d in diffs)
    mean = statistics.mean(diffs) if diffs else 0.0
    if n == 0:
        return 'no values'
    if pos == n or neg == n:
        sign = 1 if pos == n else -1
        word = 'higher' if sign > 0 else 'lower'
        side = ('' if expect == 0 else
                ', as the paper expects' if sign == expect else ', against the paper')
        return (f'{word} in {n} of {n} seeds (mean {mean:+.{digits}f}): '
                f'consistent{side}')
    if pos == neg == 0:
        return f'equal in {n} of {n} seeds: no difference at the precision shown'
    return (f'higher in {pos}, lower in {neg}, equal in {n - pos - neg} of {n} seeds '
            f'(mean {mean:+.{digits}f}): sign not consistent, undecided at this scale')


def comparison(table: str, column: str, a: str, b: str, a_vals: Sequence[float],
               b_vals: Sequence[float], expect: int, digits: int = 1) -> str:
    """One conclusion line comparing rows `a` and `b` of `table` in `column`, seed by seed,
    from the values as the table shows them (rounded to `digits`)."""
    av = [round(float(v), digits) for v in a_vals]
    bv = [round(float(v), digits) for v in b_vals]
    if len(av) != len(bv):
        raise ValueError(f'{table} / {column}: {len(av)} seeds of {a!r}, {len(bv)} of {b!r}')
    diffs = [round(x - y, digits) for x, y in zip(av, bv)]
    shown = ', '.join(f'{d:+.{digits}f}' for d in diffs) or NA
    return (f'- [{table}|{column}|{a}|{b}|paper: {EXPECT_WORDS[expect]}] per seed {shown}: '
            f'{a} {verdict(diffs, expect, digits)}')


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


def check_report(text: str) -> list[str]:
    """Contradictions between the conclusion lines of a report and its tables: each
    conclusion is recomputed from the two cells it names and the paper's direction it states
    (its per-seed differences, its count of seeds, its verdict). [] for a consistent report."""
    tables = parse_tables(text)
    problems = []
    for line in text.splitlines():
        if not line.startswith('- ['):
            continue
        m = CONCLUSION.match(line)
        if not m:
            problems.append(f'unparsable conclusion: {line}')
            continue
        t, c, a, b = (m.group(k) for k in ('table', 'col', 'a', 'b'))
        try:
            a_vals = parse_cell(tables[t][a][c])
            b_vals = parse_cell(tables[t][b][c])
        except (KeyError, ValueError) as err:
            problems.append(f'{line}: its cells are not in the tables ({err})')
            continue
        digits = max((len(v.split('.')[1]) if '.' in v else 0)
                     for v in re.findall(r'-?\d+(?:\.\d+)?', tables[t][a][c]))
        expect = {w: k for k, w in EXPECT_WORDS.items()}[m.group('expect')]
        want = comparison(t, c, a, b, a_vals, b_vals, expect, digits)
        if want != line:
            problems.append(f'says:     {line}\n  tables give: {want}')
    return problems
