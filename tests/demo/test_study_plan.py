"""The study's plan and reading rules (peco_mm/tooling/study_plan.py), the statistics they
rest on (equivalence tests, detectable differences) and the floor of code agreement."""
import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from peco_mm.tooling.paired_stats import detectable_difference, t_interval, tost
from peco_mm.tooling.study_plan import check_reading, read_plan
from peco_mm.tooling.study_report import (check_report, comparison, conclusion_block,
                                          markdown_table)

ROOT = Path(__file__).resolve().parents[2]
T = 'Table X'


def test_repairing_agreement_is_the_mean_over_every_repairing():
    from peco_mm.tooling.code_agreement import repairing_agreement
    g = torch.Generator().manual_seed(0)
    ca = torch.randint(0, 4, (7, 3, 2), generator=g)
    cb = torch.where(torch.rand(7, 3, 2, generator=g) < 0.5, ca,
                     torch.randint(0, 4, (7, 3, 2), generator=g))
    brute = np.mean([(ca[i] == cb[j]).double().mean().item()
                     for i, j in itertools.permutations(range(7), 2)])
    assert repairing_agreement(ca, cb) == pytest.approx(brute, abs=1e-12)
    # one code everywhere: every re-pairing agrees; a code per image: none does
    assert repairing_agreement(torch.zeros(3, 2, 2), torch.zeros(3, 2, 2)) == 1.0
    ids = torch.arange(4).view(4, 1, 1).expand(4, 2, 2)
    assert repairing_agreement(ids, ids) == 0.0
    with pytest.raises(ValueError, match='N >= 2'):
        repairing_agreement(ids[:1], ids[:1])


def test_tost_shows_equivalence_exactly_when_the_90_interval_lies_inside_the_margin():
    rng = np.random.default_rng(0)
    for _ in range(200):
        d = rng.normal(rng.uniform(-2, 2), rng.uniform(0.2, 2), size=8)
        m = rng.uniform(0.5, 3)
        iv = t_interval(d, 0.90)
        p, shown = tost(d, m)
        assert shown == (-m < iv.low and iv.high < m), (d, m)
        assert (p < 0.05) == shown
    with pytest.raises(ValueError, match='positive'):
        tost([1.0, 2.0], 0)


def test_detectable_difference_has_the_stated_power_by_simulation():
    """Monte Carlo, independent of the noncentral t: paired t-tests of n normal differences of
    sd 1 and true mean `delta` reject 0 at 5 % in 80 % of draws."""
    from scipy.stats import t as student
    rng = np.random.default_rng(1)
    for n in (5, 8, 12):
        delta = detectable_difference(1.0, n)
        d = rng.normal(delta, 1.0, size=(40000, n))
        tstat = d.mean(1) / (d.std(1, ddof=1) / np.sqrt(n))
        power = np.mean(np.abs(tstat) > student.ppf(0.975, n - 1))
        assert power == pytest.approx(0.8, abs=0.01), (n, delta, power)
    assert detectable_difference(3.0, 8) == pytest.approx(3 * detectable_difference(1.0, 8))


def plan_file(tmp_path, **extra) -> Path:
    data = dict(dict(primary=[dict(name='P1', table=T, column='c', a='A', b='B')],
                     columns=['c'], rows=['A', 'B']), **extra)
    path = tmp_path / 'plan.md'
    path.write_text('# a plan\n\n```json\n' + json.dumps(data) + '\n```\n')
    return path


def report(plan, margin=None) -> str:
    rows = {'A': ['1.0 ± 0.1 (1.0, 1.1, 0.9, 1.0, 1.2)', '3.0 ± 0.0 (3.0, 3.0, 3.1, 3.0, 3.0)'],
            'B': ['0.0 ± 0.1 (0.1, 0.0, 0.0, -0.1, 0.0)', '3.0 ± 0.0 (3.0, 3.1, 3.0, 3.0, 3.0)'],
            'C': ['0.5 ± 0.1 (0.5, 0.6, 0.4, 0.5, 0.5)', '1.0 ± 0.0 (1.0, 1.0, 1.0, 1.0, 1.0)']}
    table = markdown_table(T, ['c', 'd'], rows)
    vals = {k: [[float(x) for x in re.search(r'\((.*)\)', c).group(1).split(',')] for c in v]
            for k, v in rows.items()}
    cmps = [comparison(T, 'c', 'A', 'B', vals['A'][0], vals['B'][0], 1),
            comparison(T, 'd', 'A', 'B', vals['A'][1], vals['B'][1], 0),
            comparison(T, 'c', 'A', 'C', vals['A'][0], vals['C'][0], 1)]
    from peco_mm.tooling.study_plan import plan_line
    from peco_mm.tooling.study_report import apply_plan
    body = conclusion_block(apply_plan(cmps, plan))
    return '\n'.join([plan_line(plan, '/'), '', table, '', '## Conclusions', '', *body]) + '\n'


def test_a_report_is_held_to_its_plan(tmp_path):
    plan = read_plan(plan_file(tmp_path))
    text = report(plan)
    assert check_report(text, plan) == []
    lines = [line for line in text.splitlines() if line.startswith('- [')]
    assert lines[0].startswith('- [P1|Table X|c|A|B|paper: higher]')
    # column d and row C are not in the plan: exploratory, an interval and no verdict
    assert lines[1].startswith('- [exploratory|Table X|d|A|B|') and \
        lines[1].endswith('exploratory (not in the plan), no verdict')
    assert lines[2].startswith('- [exploratory|Table X|c|A|C|')
    # promoting an exploratory line to a secondary one is refused, as is a changed plan
    forged = text.replace('- [exploratory|Table X|c|A|C|', '- [secondary|Table X|c|A|C|')
    assert any('the plan makes it exploratory' in p for p in check_report(forged, plan))
    plan_file(tmp_path, note='edited after the runs')
    assert any('the plan changed after the runs' in p
               for p in check_report(text, read_plan(tmp_path / 'plan.md')))


def test_equality_is_read_only_through_a_planned_margin(tmp_path):
    margin = [dict(table=T, column='d', a='A', b='B', margin=0.5)]
    plan = read_plan(plan_file(tmp_path, columns=['c', 'd'], equivalence=margin))
    text = report(plan)
    line = next(x for x in text.splitlines() if x.startswith('- [secondary|Table X|d|'))
    assert '|equivalence margin ±0.5]' in line
    assert re.search(r'; equivalence within ±0\.5 \(two one-sided tests, P [<=] [\d.]+\): shown$',
                     line)
    assert check_report(text, plan) == []
    stripped = text.replace('|equivalence margin ±0.5]', ']')
    assert any('the plan states 0.5' in p for p in check_report(stripped, plan))


@pytest.mark.parametrize('sentence, rule', [
    ('Compute-matched scratch matches PeCo (+0.04 [−4.4, +4.5]).', 'equality'),
    ("The paper's 1.2-point gap is not seen here (+0.6 [-2.3, +3.4]).", 'equality'),
    ('The dVAE row is below PeCo downstream (+7.7 [+3.0, +12.5], not tested after Holm).',
     'direction'),
    ('The re-pairing floor is 3.1 % for PeCo.', 'exploratory'),
])
def test_check_reading_refuses_each_over_read(sentence, rule):
    problems = check_reading('Some text. ' + sentence + ' More text.', ('re-pairing', ))
    assert len(problems) == 1 and problems[0].startswith(
        dict(equality='equality read', direction='a direction read',
             exploratory='a measure added')[rule]), problems


@pytest.mark.parametrize('sentence', [
    'PeCo minus scratch: +2.3 [−1.8, +6.4], which includes 0.',
    'Within the equivalence margin of 2 points stated in the plan, the rows match (TOST P = '
    '0.01, 90 % interval [-1.2, +1.0]).',
    'PeCo beats scratch after Holm (+11.0, adjusted interval [+0.6, +21.4]).',
    'The dVAE comparison is not tested after Holm\'s stop (+7.7 [+3.0, +12.5]).',
    'The re-pairing floor (exploratory) is 3.1 %.',
])
def test_check_reading_keeps_what_the_statistics_say(sentence):
    assert check_reading(sentence, ('re-pairing', )) == []


def test_docs_read_the_study_by_its_rules():
    """docs/reproduce.md's study sections keep to the reading rules."""
    text = (ROOT / 'docs' / 'reproduce.md').read_text()
    study = text[text.index('## The paper\'s effect at CPU scale'):]
    assert check_reading(study, ('re-pairing', )) == []


def test_plan_errors_name_the_file_and_the_key(tmp_path):
    bad = tmp_path / 'bad.md'
    bad.write_text('no block')
    with pytest.raises(ValueError, match=r'bad\.md: a plan holds exactly one ```json block'):
        read_plan(bad)
    bad.write_text('```json\n{"primary": [], "columns": "c", "rows": []}\n```')
    with pytest.raises(ValueError, match=r"bad\.md: key 'columns' must be a list"):
        read_plan(bad)
    bad.write_text('```json\n{"primary": [{"name": "P1", "table": "t"}], "columns": [], '
                   '"rows": []}\n```')
    with pytest.raises(ValueError, match=r"lacks the string key\(s\) \['column', 'a', 'b'\]"):
        read_plan(bad)


def test_shipped_plans_parse_and_name_their_endpoints():
    for path in sorted((ROOT / 'docs' / 'plans').glob('*.md')):
        plan = read_plan(path)
        assert sorted(plan.primary.values())[:3] == ['P1', 'P2', 'P3'], path
        for table, column, a, b in plan.primary:
            assert column in plan.columns and {a, b} <= plan.rows, (path, column, a, b)


def endpoints_file(tmp_path, a=(30.0, 31.0, 29.5, 33.0, 30.0), b=(20.0, 24.0, 22.5, 21.0, 25.0)):
    data = dict(replicates=list(range(len(a))), comparisons=[
        dict(name='P2', table=T, column='few-label top-1 (%)', key='accuracy/top1', a='PeCo',
             b='pixel', expect=1, a_values=list(a), b_values=list(b), digits=1),
        dict(name='S', table=T, column='mIoU (%)', key='mIoU', a='PeCo', b='pixel', expect=1,
             a_values=list(a), b_values=list(b), digits=1)])
    (tmp_path / 'endpoints.json').write_text(json.dumps(data))
    return tmp_path


def test_summary_table_recomputes_the_endpoints_from_committed_values(tmp_path):
    from peco_mm.tooling.study_results import docs_mismatches, summary_table
    table = summary_table(endpoints_file(tmp_path))
    rows = table.splitlines()
    assert len(rows) == 3 and rows[2].startswith('| P2 | few-label top-1 (%): PeCo minus pixel |')
    d = [10.0, 7.0, 7.0, 12.0, 5.0]
    iv = t_interval(d)
    assert f'[{iv.low:+.2f}, {iv.high:+.2f}]' in rows[2]
    assert "excludes 0 in the paper's direction" in rows[2]
    assert f'| {detectable_difference(np.std(d, ddof=1), 5):.1f} |' in rows[2]
    docs = f'text\n<!-- results: {tmp_path.name} -->\n{table}<!-- /results -->\nmore'
    assert docs_mismatches(docs, tmp_path.parent) == []
    endpoints_file(tmp_path, b=(20.0, 24.0, 22.5, 21.0, 26.0))  # a committed value changed
    assert len(docs_mismatches(docs, tmp_path.parent)) == 1


def test_docs_show_the_committed_results_as_they_are():
    from peco_mm.tooling.study_results import BLOCK, docs_mismatches
    for doc in sorted((ROOT / 'docs').glob('*.md')):
        text = doc.read_text()
        for m in BLOCK.finditer(text):
            assert (ROOT / m.group('dir') / 'endpoints.json').is_file(), (doc, m.group('dir'))
        assert docs_mismatches(text, ROOT) == [], doc


def test_a_draft_plan_governs_no_replicate(tmp_path):
    """A plan whose status is not 'fixed' (its tuning figures not yet in) governs no run; the
    label-free profile names its own plan."""
    from tests.conftest import load_tool
    tool = load_tool('study')
    assert tool.PROFILES['label_free']['plan'] == 'docs/plans/shape_world_label_free.md'
    assert read_plan(ROOT / tool.PROFILES['label_free']['plan']).primary
    draft = plan_file(tmp_path, status='draft')
    with pytest.raises(SystemExit, match=r"status 'draft' governs no run"):
        tool.study_plan(str(draft), {})
    assert tool.study_plan(str(plan_file(tmp_path, status='fixed')), {}).primary
    assert tool.study_plan(None, tool.PROFILES['full']).primary  # the supervised design's
