"""The study's pieces that must hold whatever the numbers: the shape world is deterministic
and in the host layouts, and the report's conclusions are written from, and checked against,
its tables."""
import numpy as np
import pytest
from PIL import Image

from peco_mm.tooling.paired_stats import holm, sign_flip_p, t_interval, verdict
from peco_mm.tooling.study_report import (CONCLUSIONS_INTRO, ENDPOINTS, cell, check_report,
                                          comparison, conclusion_block, conclusion_lines,
                                          markdown_table, parse_cell, parse_tables,
                                          write_checked)

# eight replicates of two rows, paired: row a is above row b in 6 of 8
A8 = [31.5, 28.0, 35.5, 30.0, 33.0, 29.5, 34.0, 26.5]
B8 = [29.0, 28.5, 30.5, 31.0, 29.0, 27.0, 30.5, 26.0]


def test_verdict_refuses_fewer_than_five_replicates():
    with pytest.raises(ValueError, match='too few replicates for a verdict: 4 paired values'):
        verdict([1.0, 2.0, 1.5, 2.5], 1)
    assert verdict([1.0, 2.0, 1.5, 2.5, 1.2], 1) == "excludes 0 in the paper's direction"
    assert verdict([1.0, 2.0, 1.5, 2.5, 1.2], -1) == 'excludes 0 against the paper'
    assert verdict([1.0, 2.0, 1.5, 2.5, 1.2], 0) == 'excludes 0'
    assert verdict([1.0, -2.0, 1.5, -2.5, 1.2], 1) == 'includes 0'
    # the report's line: an interval, but no verdict, below five replicates
    four = conclusion_lines([comparison('T', 'c', 'a', 'b', [5, 6, 7, 8], [1, 2, 3, 4], 1)])[0]
    assert four.endswith('too few replicates for a verdict (4; 5 needed)')
    assert '95 % CI [+4.00, +4.00]' in four and 'excludes' not in four


def test_paired_intervals_match_scipy():
    """The t interval and P of the paired differences equal scipy's paired t-test on the two
    rows, at 95 % and at a Holm level."""
    from scipy import stats
    diffs = [a - b for a, b in zip(A8, B8)]
    ref = stats.ttest_rel(A8, B8)
    for level in (0.95, 1 - 0.05 / 3):
        iv = t_interval(diffs, level)
        lo, hi = ref.confidence_interval(level)
        assert iv.low == pytest.approx(lo, abs=1e-9) and iv.high == pytest.approx(hi, abs=1e-9)
    assert t_interval(diffs).p == pytest.approx(ref.pvalue, abs=1e-12)
    assert t_interval(diffs).mean == pytest.approx(2.0625)
    # every replicate the same difference: a point, decided; the same value: nothing
    same = t_interval([2.0] * 5)
    assert (same.low, same.high, same.p) == (2.0, 2.0, 0.0)
    assert t_interval([0.0] * 5).p == 1.0
    with pytest.raises(ValueError, match='at least 2 finite'):
        t_interval([1.0, float('nan')])


def test_sign_flip_p_counts_sign_patterns():
    # sums of +-3 +-1 +-1: 5, 3, 3, 1, -1, -3, -3, -5; |sum| >= 5 in 2 of 8
    assert sign_flip_p([3.0, 1.0, 1.0]) == 0.25
    assert sign_flip_p([1.0, 2.0, 3.0, 4.0, 5.0]) == 2 / 32  # the least P of 5 replicates
    assert sign_flip_p([1.0, 2.0, -3.0]) == 1.0  # mean 0


def test_holm_matches_a_hand_worked_example():
    """P = 0.01, 0.04, 0.03, 0.005 (m = 4). Sorted: 0.005 <= 0.05/4 and 0.01 <= 0.05/3 pass,
    0.03 > 0.05/2 stops the procedure at step 3, so 0.04 is not tested. Adjusted P: 4 x 0.005
    = 0.02, 3 x 0.01 = 0.03, 2 x 0.03 = 0.06, max(0.06, 1 x 0.04) = 0.06."""
    steps = holm([0.01, 0.04, 0.03, 0.005])
    assert [s.step for s in steps] == [2, 4, 3, 1]
    assert [s.adjusted_p for s in steps] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert [s.level for s in steps] == pytest.approx([1 - 0.05 / 3, 0.95, 0.975, 0.9875])
    assert all(s.stopped_at == 3 for s in steps)
    assert [s.tested for s in steps] == [True, False, True, True]
    assert all(s.stopped_at is None for s in holm([0.001, 0.02]))


def test_secondary_lines_read_their_holm_step_interval():
    """Three secondary comparisons of 8 replicates: the strongest is read at 1 - 0.05/3, the
    next at 1 - 0.05/2; A8 - B8 (P = 0.03) excludes 0 at 95 % but not at its Holm level,
    which stops the procedure; the primary endpoint stays at 95 %."""
    from scipy import stats
    strong = [v + 5 for v in B8]
    weak = [b + 0.1 * (-1) ** i for i, b in enumerate(B8)]
    cs = [comparison('T', 'c', 'a', 'b', A8, B8, 1),
          comparison('T', 'c', 'strong', 'b', strong, B8, 1),
          comparison('T', 'c', 'weak', 'b', weak, B8, 1),
          comparison('T', 'd', 'a', 'b', A8, B8, 1)]
    lines = conclusion_lines(cs, {('T', 'd', 'a', 'b'): 'P1'})
    lo, hi = stats.ttest_rel(A8, B8).confidence_interval(1 - 0.05 / 2)
    assert f'Holm step 2 of 3: 97.50 % CI [{lo:+.2f}, {hi:+.2f}]' in lines[0]
    assert lines[0].endswith('includes 0') and lo < 0 < hi
    assert 'Holm step 1 of 3' in lines[1] and lines[1].endswith("in the paper's direction")
    assert lines[2].endswith('Holm step 3 of 3: not tested (Holm stopped at step 2)')
    lo, hi = stats.ttest_rel(A8, B8).confidence_interval(0.95)
    assert lines[3].startswith('- [P1|T|d|a|b|paper: higher] per replicate +2.5, -0.5, +5.0')
    assert f'95 % CI [{lo:+.2f}, {hi:+.2f}], sign-flip P = ' in lines[3] and lo > 0
    assert lines[3].endswith("excludes 0 in the paper's direction")
    with pytest.raises(ValueError, match='P2'):  # a primary endpoint no comparison states
        conclusion_lines(cs, {('T', 'e', 'a', 'b'): 'P2'})


def test_cells_round_trip_and_comparisons_use_the_shown_values():
    assert cell([1.04, 2.0, 3.0]) == '2.0 ± 1.0 (1.0, 2.0, 3.0)'
    assert parse_cell(cell([1.04, 2.0, 3.0])) == [1.0, 2.0, 3.0]
    assert parse_cell('—') == [] and parse_cell('7.5') == [7.5]
    # 1.04 - 1.0 shows as 0.0: the difference a reader of the table computes
    assert comparison('T', 'c', 'a', 'b', [1.04, 3.0], [1.0, 2.0], 1).diffs == (0.0, 1.0)
    with pytest.raises(ValueError, match='paired'):
        comparison('T', 'c', 'a', 'b', [1.0, 2.0], [1.0], 1)
    # a metric that came out nan: shown, read back, no verdict, and the report still checks
    nan = float('nan')
    assert cell([nan, 1.0, 2.0]) == 'nan ± nan (nan, 1.0, 2.0)'
    text = report([nan] + A8[1:], B8)
    assert check_report(text) == [] and 'a value is not finite, no verdict' in text


def report(a, b, expect=1, role='P1'):
    table = markdown_table('T4', ['probe (%)'], {'PeCo': [cell(a)], 'pixel': [cell(b)]})
    pair = comparison('T4', 'probe (%)', 'PeCo', 'pixel', a, b, expect, role=role)
    block = '\n'.join(conclusion_block([pair]))
    return f'{table}\n\n## Conclusions\n\n{CONCLUSIONS_INTRO}\n\n{block}\n\n## Next\n'


def test_check_report_recomputes_intervals_and_catches_contradictions():
    good = report(A8, B8)
    assert check_report(good) == []
    # the interval the line states is scipy's, from the values the table shows
    from scipy import stats
    row = parse_tables(good)['T4']
    lo, hi = stats.ttest_rel(parse_cell(row['PeCo']['probe (%)']),
                             parse_cell(row['pixel']['probe (%)'])).confidence_interval(0.95)
    assert f'95 % CI [{lo:+.2f}, {hi:+.2f}]' in good
    # the primary endpoints' table: the differences as a cell, the interval, the verdict
    verdict_words = "excludes 0 in the paper's direction"
    assert parse_tables(good)[ENDPOINTS]['P1'] == {
        'row 1 minus row 2': 'probe (%): PeCo minus pixel', 'paper': 'higher',
        'difference per replicate': '2.1 ± 2.2 (2.5, -0.5, 5.0, -1.0, 4.0, 2.5, 3.5, 0.5)',
        '95 % CI': f'[{lo:+.2f}, {hi:+.2f}]', 'verdict': verdict_words}
    table_row = good[good.index('| P1 |'):].splitlines()[0]
    assert check_report(good.replace(table_row, table_row.replace(verdict_words, 'includes 0')))
    for bad in (good.replace(verdict_words, 'includes 0'),  # a sentence against its numbers
                good.replace(verdict_words, 'excludes 0 against the paper'),
                good.replace(f'{lo:+.2f}', f'{lo + 0.5:+.2f}'),  # a changed interval
                good.replace('(31.5, 28.0,', '(21.5, 28.0,'),  # a changed table cell
                good.replace('|pixel|', '|scratch|'),  # a row the tables lack
                good.replace('[P1|', '[secondary|'),  # a primary endpoint demoted
                good.replace('\n\n## Next', '\nPeCo is better in every seed.\n\n## Next'),
                good + good[good.index('- [P1'):]):  # P1 stated twice
        assert check_report(bad), bad
    against = report(B8, A8)
    assert check_report(against) == [] and against.rstrip().endswith(
        'excludes 0 against the paper\n\n## Next'.rstrip())
    few = report(A8[:3], B8[:3])
    assert check_report(few) == [] and 'too few replicates for a verdict (3; 5 needed)' in few
    assert check_report(few.replace('(3; 5 needed)', '(3; 5 needed): ' + verdict_words))


def test_write_checked_exits_naming_the_report(tmp_path):
    good = report(A8, B8)
    assert write_checked(tmp_path / 'report.md', good).read_text() == good
    with pytest.raises(SystemExit) as exit_:
        write_checked(tmp_path / 'bad.md', good.replace("in the paper's direction",
                                                        'against the paper'))
    assert str(tmp_path / 'bad.md') in str(exit_.value.code)
    assert 'disagree' in str(exit_.value.code) and (tmp_path / 'bad.md').is_file()


def test_shape_world_is_deterministic_and_in_host_layouts(tmp_path):
    """One seed writes the same bytes twice; the classes split into A (only the perceptual
    network's labelled split) and B (every evaluation split, each with a tuning and a test
    half); another seed draws another world."""
    from peco_mm.tooling.shape_world import CLASSES, make_world, read_classes
    kw = dict(n_pretrain=12, per_class=1, val_per_class=2, judge_per_class=1, n_pairs=3)
    a = make_world(tmp_path / 'a', **kw)
    make_world(tmp_path / 'b', **kw)
    fa = sorted(p.relative_to(tmp_path / 'a') for p in (tmp_path / 'a').rglob('*.png'))
    fb = sorted(p.relative_to(tmp_path / 'b') for p in (tmp_path / 'b').rglob('*.png'))
    # unlabeled, perceptual train + val (A), judge (B), cls train/val/test, ade x 2, pairs
    assert fa == fb and len(fa) == 12 + 5 * (1 + 2) + 5 + 5 * (1 + 2 + 2) + 2 * 5 * 5 + 6
    assert all((tmp_path / 'a' / r).read_bytes() == (tmp_path / 'b' / r).read_bytes()
               for r in fa)
    A, B = a['classes']['A'], a['classes']['B']
    assert read_classes(tmp_path / 'a') == a['classes'] and len(A) == len(B) == 5
    assert sorted(A + B) == sorted(CLASSES)
    assert sorted(p.name for p in (a['perceptual'] / 'train').iterdir()) == sorted(A)
    for split in ('judge/train', 'cls/train', 'cls/val', 'cls/test'):
        assert sorted(p.name for p in (tmp_path / 'a' / split).iterdir()) == sorted(B)
    # per-pixel masks of B: background 1, the k-th class of B at 2 + k, never 0
    ann = sorted((a['ade'] / 'annotations' / 'test').glob('*.png'))
    labels = [np.asarray(Image.open(f)) for f in ann]
    assert all(set(np.unique(m)) == {1, 2 + i // 2} for i, m in enumerate(labels))
    img = np.asarray(Image.open(sorted((a['ade'] / 'images' / 'test').glob('*'))[0]))
    assert img.shape == (32, 32, 3) and img.std() > 10
    # the tuning and the test half are different images
    val, test = (sorted((a['cls'] / h / B[0]).glob('*.png')) for h in ('val', 'test'))
    assert val[0].read_bytes() != test[0].read_bytes()
    other = make_world(tmp_path / 'c', seed=1, **kw)
    assert other['classes'] != a['classes']  # seed 1 draws another split (and world)
    with pytest.raises(ValueError, match=r'classes.json: expected'):
        (tmp_path / 'c' / 'classes.json').write_text('{"A": 3}')
        read_classes(tmp_path / 'c')


def test_geometry_matched_pairs_redraw_only_held_out_nuisances():
    """A pair is one shape at one pose (identical masks) under two nuisance draws from the
    held-out backgrounds and hues; training images never draw those hues."""
    import colorsys

    from peco_mm.tooling.shape_world import (HELD_OUT_HUES, _colour, compose, draw_geometry,
                                             draw_nuisance)
    rng = np.random.default_rng(0)

    def hue(c):
        h, _, sat = colorsys.rgb_to_hsv(*map(float, c))
        return sat > 0.05 and HELD_OUT_HUES[0] <= h < HELD_OUT_HUES[1]
    assert all(hue(_colour(rng, b, True)) for b in (True, False) * 20)
    assert not any(hue(_colour(rng, b, False)) for b in (True, False) * 20)
    diffs = []
    for label in range(4):
        g = draw_geometry(rng, 32)
        (ia, ma), (ib, mb) = (compose(label, g, draw_nuisance(rng, 32, True)) for _ in 'ab')
        assert np.array_equal(ma, mb) and ma.sum() > 30
        diffs.append(np.abs(ia.astype(int) - ib.astype(int)).mean())
    assert min(diffs) > 10  # the nuisances differ between the two images of a pair


def test_nuisances_vary_while_the_class_is_the_shape():
    """Two images of one class differ in colour far more than the masks of one shape at one
    pose differ: the pixels carry the nuisances."""
    from peco_mm.tooling.shape_world import render, shape_alpha
    rng = np.random.default_rng(0)
    imgs = [render(rng, 32, 0)[0].astype(float) for _ in range(20)]
    means = np.stack([im.mean((0, 1)) for im in imgs])
    assert means.std(0).min() > 15  # colours and lighting vary between images of one class
    ring = shape_alpha('ring', 32, 16, 16, 12, 0.0)
    assert ring[16, 16] == 0 and ring[16, 4:7].max() == 1  # a hole in the middle


def test_upright_world_changes_only_the_angle():
    """rotate=False draws the same images but for the shape's angle: the random stream is
    consumed alike, an upright square fills its bounding box, a rotated one mostly does not."""
    from peco_mm.tooling.shape_world import CLASSES, render
    square = CLASSES.index('square')

    def draw(rotate, n=8):
        rng = np.random.default_rng(3)
        out = [render(rng, 32, square, rotate) for _ in range(n)]
        return out, rng.random()

    upright, next_upright = draw(False)
    rotated, next_rotated = draw(True)
    assert next_upright == next_rotated  # the rest of the world is image for image the same

    def fill(mask):  # the mask's share of its bounding box
        ys, xs = np.nonzero(mask)
        return mask.sum() / ((ys.ptp() + 1) * (xs.ptp() + 1))
    assert all(fill(m) > 0.9 for _, m in upright)
    assert sum(fill(m) < 0.8 for _, m in rotated) >= 4
    # away from the object (2 px past the mask: its anti-aliased edge and thin corners) the
    # pixels agree: background, lighting and noise are drawn alike
    for (a, ma), (b, mb) in zip(upright, rotated):
        near = ma | mb
        for _ in range(2):
            p = np.pad(near, 1)
            near = p[1:-1, 1:-1] | p[:-2, 1:-1] | p[2:, 1:-1] | p[1:-1, :-2] | p[1:-1, 2:]
        assert (~near).sum() > 200 and np.array_equal(a[~near], b[~near])


def fake_results(study, top1=lambda r: 9.0 + 2 * r, probe=lambda r, key: 30.0):
    """Recorded-looking results of every run of `study`, per replicate (no training)."""
    tok = {'tokenizer/psnr': 20.0, 'tokenizer/ssim': 0.5, 'tokenizer/recon_cls_acc': 40.0,
           'tokenizer/usage': 0.9, 'agreement/matched': 20.0, 'agreement/mismatched': 5.0}
    return {r: dict(
        tokenizers={k: dict(metrics=dict(tok, **{'tokenizer/codeword_probe_acc': probe(r, k),
                                                 'tokenizer/psnr': 20.0 + r}))
                    for k in study.tokenizers},
        pretrain={t: dict(metrics=dict(mim_acc=5.0 + r)) for t in study.targets},
        downstream={(task, init): dict(metrics={'accuracy/top1': top1(r), 'mIoU': 30.0 + r})
                    for task in ('cls', 'seg') for init in study.inits},
        chance={'accuracy/top1': 10.0, 'mIoU': 4.0, 'mim_acc': 100 / 128})
        for r in study.replicates}


def test_report_rows_are_per_replicate_lists_paired_by_replicate(tmp_path):
    """Every cell lists one value per replicate in replicate order; the primary endpoints
    come first, each with both rows' per-replicate values (value i = replicate i); every
    trained row is compared with chance; the conclusions agree with the tables."""
    from tests.conftest import load_tool
    from peco_mm.tooling.study_report import parse_cell, parse_tables
    study_tool = load_tool('study')
    study = study_tool.Study(str(tmp_path), 'full', replicates=3)
    res = fake_results(study, probe=lambda r, k: {'lambda1': 30.0 + r, 'lambda0': 20.0,
                                                  'random': 25.0, 'clsloss': 26.0,
                                                  'dvae': 22.0}[k])
    tables, conclusions, data = study_tool.report_tables(study, res)
    text = '\n\n'.join(tables) + '\n\n' + '\n'.join(conclusions) + '\n'
    assert check_report(text) == []
    assert [d['name'] for d in data[:3]] == ['P1', 'P2', 'P3']
    p1 = data[0]
    assert (p1['a'], p1['b'], p1['expect']) == ('lambda = 1 (PeCo)', 'lambda = 0 (pixel only)', 1)
    assert p1['a_values'] == [30.0, 31.0, 32.0] and p1['b_values'] == [20.0, 20.0, 20.0]
    assert all(w in conclusions[0] for w in ('codeword probe (%)', 'lambda = 1 (PeCo)'))
    t4 = parse_tables(text)[study_tool.T4]
    cls_tok = 'lambda = 0 + classification loss on codewords (labels of A)'
    assert list(t4) == ['lambda = 0 (pixel only)', 'lambda = 1 (PeCo)',
                        'lambda = 1, random perceptual network', cls_tok,
                        'dVAE, Gumbel-softmax (pixel only)']
    assert parse_cell(t4['lambda = 1 (PeCo)']['PSNR (dB)']) == [20.0, 21.0, 22.0]
    assert parse_cell(t4[cls_tok]['codeword probe (%)']) == [26.0, 26.0, 26.0]
    down = parse_tables(text)[study_tool.T23]
    cls_row = 'classification loss on codewords (Table 6 control codes)'
    assert list(down) == ['PeCo (lambda = 1 codes)', 'pixel codebook (lambda = 0 codes)',
                          cls_row, 'dVAE (Gumbel-softmax codes)', 'scratch (own recipe)',
                          'scratch, compute-matched (own recipe)',
                          'chance (a model that learned nothing)']
    vs_chance = [c for c in conclusions if '|chance (a model' in c]
    assert len(vs_chance) == 6 * 2 + 4  # 6 rows x (top-1, mIoU) + MIM accuracy of 4 targets
    # Table 6's control: PeCo against it, secondary (Holm), the paper's direction PeCo higher
    vs_cls = [d for d in data if d['b'] == cls_row]
    assert [(d['name'], d['column'], d['expect']) for d in vs_cls] == [
        ('S', 'few-label top-1 (%)', 1), ('S', 'mIoU (%)', 1)]
    assert vs_cls[0]['a_values'] == [9.0, 11.0, 13.0]
    # Table 2's dVAE baseline: PeCo against it downstream and on the judge-free measures
    vs_dvae = [(d['table'], d['column']) for d in data if d['b'].startswith('dVAE')]
    assert vs_dvae == [(study_tool.T4, 'codeword probe (%)'),
                       (study_tool.T4, 'code agreement, matched pairs (%)'),
                       (study_tool.T23, 'few-label top-1 (%)'), (study_tool.T23, 'mIoU (%)')]
    probe = next(d for d in data if d['b'].startswith('dVAE'))
    assert probe['a_values'] == [30.0, 31.0, 32.0] and probe['b_values'] == [22.0] * 3
    # the control's tokenizer row is compared with PeCo's on the judge-free measures too
    assert any('|code agreement, matched pairs (%)|lambda = 1 (PeCo)|lambda = 1, random' in c
               for c in conclusions)


def test_report_verdicts_are_intervals_and_need_five_replicates(tmp_path):
    """With 5 replicates the primary endpoints are read from their 95 % intervals (no sign
    counts): P1's differences 1, 2, 0, 1.5, 1 exclude 0 in the paper's direction, P2's (all 0)
    include it; the report's body opens with the endpoints' table; with 3 replicates no line
    gives a verdict."""
    from tests.conftest import load_tool
    study_tool = load_tool('study')
    lead = [1.0, 2.0, 0.0, 1.5, 1.0]
    study = study_tool.Study(str(tmp_path), 'full', replicates=5)
    res = fake_results(study, probe=lambda r, k: 30.0 + (lead[r] if k == 'lambda1' else 0.0))
    tables, body, _ = study_tool.report_tables(study, res)
    assert check_report('\n\n'.join(tables) + '\n\n' + '\n'.join(body) + '\n') == []
    assert body[0].startswith(f'**{ENDPOINTS}**')
    primary = {c[3:5]: c for c in body if c.startswith('- [P')}
    assert sorted(primary) == ['P1', 'P2', 'P3']
    assert 'per replicate +1.0, +2.0, +0.0, +1.5, +1.0: mean +1.10' in primary['P1']
    assert primary['P1'].endswith("excludes 0 in the paper's direction")
    assert primary['P2'].endswith(': includes 0')
    assert not any('consistent' in c or 'every seed' in c for c in body)
    few = study_tool.Study(str(tmp_path), 'full', replicates=3)
    _, lines, _ = study_tool.report_tables(few, fake_results(few))
    assert all(c.endswith('too few replicates for a verdict (3; 5 needed)') for c in lines
               if c.startswith('- ['))


def test_endpoint_values_are_the_cells_shown_for_numpy_metrics(tmp_path):
    """A metric recorded as a numpy float32 (mmseg's mIoU) is compared as its table cell shows
    it: np.float32(34.55) rounds to 34.6 in numpy but is 34.5 as a Python float, and a report
    comparing the former with the table's latter failed its own check."""
    from tests.conftest import load_tool
    study_tool = load_tool('study')
    study = study_tool.Study(str(tmp_path), 'full', replicates=5)
    res = fake_results(study)
    for r in study.replicates:
        res[r]['downstream'][('seg', 'scratch_matched')]['metrics']['mIoU'] = np.float32(34.55)
    tables, body, data = study_tool.report_tables(study, res)
    assert check_report('\n\n'.join(tables) + '\n\n' + '\n'.join(body) + '\n') == []
    cmp = next(d for d in data if d['column'] == 'mIoU (%)' and 'compute-matched' in d['b'])
    assert cmp['b_values'] == [34.5] * 5


def test_study_exits_when_its_report_contradicts_its_numbers(tmp_path, monkeypatch):
    """The report is checked as it is written: a conclusion that disagrees with its tables
    stops tools/study.py with a non-zero status naming report.md."""
    from tests.conftest import load_tool
    from peco_mm.tooling import study_tables
    tool = load_tool('study')
    study = tool.Study(str(tmp_path), 'full', replicates=5)
    study.change(knn_networks=('pairs', ))
    res = fake_results(study)
    for r in study.replicates:
        res[r].update(world=dict(n_pretrain=8, rotate=False, per_class=1, val_per_class=1,
                                 n_pairs=1, classes=dict(A=['a'], B=['b'])),
                      nets=dict(perceptual=dict(metrics={'trained': 50.0, 'random': [10.0],
                                                         'accuracy/top1': 60.0}),
                                judge=dict(metrics={'accuracy/top1': 60.0}),
                                knn=dict(pairs=dict(metrics={'trained': 30.0 + r,
                                                             'random': [11.0, 13.0]}))))
    assert all('chance' in res[r] for r in study.replicates)  # kept with each replicate
    monkeypatch.setattr(study_tables, 'reconstruction_grid',
                        lambda study, res: str(tmp_path / 'grid.png'))
    load = dict(cpus=2, start=(0.1, 0, 0), end=(1.0, 0, 0))
    report = study_tables.write_report(study, res, 'test', 60.0, load)
    assert check_report(report.read_text()) == [] and CONCLUSIONS_INTRO in report.read_text()
    # the self-supervised network's 1-NN shape accuracy, beside the supervised loss network's
    checks = report.read_text().split('## Stage checks')[1].split('**Table 4')[0]
    assert checks.index('- Perceptual loss network: a ViT supervised') < checks.index(
        '- Self-supervised network for comparison, trained only for this check (the tokenizers '
        'use the network above): a ViT trained by MoCo v3 on geometry-matched pairs of '
        'unlabeled images (its two views share only the geometry; no labels); 1-NN shape '
        'accuracy on the held-out classes B (test half) 32.0 ± 1.6 (30.0, 31.0, 32.0, 33.0, '
        '34.0) %, the same ViT randomly initialised 12.0 ± 0.0 (12.0, 12.0, 12.0, 12.0, 12.0) %')
    assert 'perceptual 600, mocov3 900, judge 400' in report.read_text()
    tables, body, data = study_tables.report_tables(study, res)
    body = [c.replace("excludes 0 in the paper's direction", 'includes 0') for c in body]
    monkeypatch.setattr(study_tables, 'report_tables', lambda study, res: (tables, body, data))
    with pytest.raises(SystemExit) as exit_:
        study_tables.write_report(study, res, 'test', 60.0, load)
    assert exit_.value.code not in (0, None) and str(report) in exit_.value.code


def test_pair_agreement_counts_equal_codes_position_by_position():
    import torch

    from peco_mm.tooling.code_agreement import pair_agreement

    class BinCodes:  # a 2x2 grid of codes: the brightness bin of each 4x4 patch's mean
        def encode(self, x, bf16=None):
            means = x.mean(1).unflatten(1, (2, 4)).unflatten(3, (2, 4)).mean((2, 4))
            return torch.bucketize(means, torch.tensor([-0.5, 0.0, 0.5]))
    a = torch.full((2, 3, 8, 8), 0.7)
    a[1] = -0.7
    b = a.clone()
    b[1, :, :, 4:] = 0.7  # the second pair differs in its right column of codes
    codes = BinCodes()
    assert pair_agreement(codes, a, a) == 1.0
    assert pair_agreement(codes, a, b, batch_size=1) == 6 / 8  # 4 + 2 of 8 codes agree
    with pytest.raises(ValueError, match=r'shapes \(2, 3, 8, 8\) and \(1, 3, 8, 8\)'):
        pair_agreement(codes, a, a[:1])


def test_knn_accuracy_is_leave_one_out_under_cosine_similarity():
    """Each image's nearest OTHER image (cosine) must share its label; itself never counts."""
    import torch

    from peco_mm.tooling.demo_checks import knn_accuracy
    labels = torch.tensor([0, 0, 1, 1])
    # direction tells the classes apart, length does not matter under cosine similarity
    f = torch.tensor([[1.0, 0.1], [5.0, 0.0], [0.0, 1.0], [0.2, 3.0]])
    assert knn_accuracy(f, labels) == 100.0
    # image 3 now points nearer image 1 (class 0) than image 2: 3 of 4
    f2 = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.8, 0.3]])
    assert knn_accuracy(f2, labels) == 75.0


def test_trained_and_random_twins_of_a_converted_classifier(tmp_path):
    # a classifier's conversion stores its own out_type among the arguments; the random twins
    # must still build, with the trained net's architecture and different weights
    import torch

    from peco_mm.models.vit import PeCoViT
    from peco_mm.tooling.demo_checks import trained_and_random
    args = dict(arch=dict(embed_dims=32, num_layers=2, num_heads=2, mlp_ratio=2.0),
                img_size=16, patch_size=4, out_type='cls_token')
    torch.manual_seed(5)
    src = PeCoViT(**args)
    src.init_weights()
    path = tmp_path / 'net.pth'
    torch.save({'state_dict': src.state_dict(), 'meta': dict(pecovit_args=args)}, path)
    trained, randoms = trained_and_random(str(path), num_heads=2, seeds=(0, 1))
    x = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        feats = [net(x)[-1] for net in (trained, *randoms)]
    assert not trained.training and all(f.shape == (3, 32) for f in feats)
    src.out_type = 'avg_featmap'
    with torch.no_grad():
        assert torch.allclose(feats[0], src.eval()(x)[-1], atol=1e-6)
    assert not torch.allclose(feats[1], feats[2])  # seeds differ
    assert not torch.allclose(feats[0], feats[1])  # and from the trained weights


def test_perceptual_network_never_reads_a_held_out_label(tmp_path):
    """The supervised perceptual network's config, as the study trains it, reads labelled
    images of the classes A only (train and validation), and so does Table 6's control
    tokenizer (lambda = 0, classification loss on its codewords); the judge and every
    downstream run read B only; the tokenizers are tested on B's test half."""
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import DATASETS

    from tests.conftest import load_tool
    from peco_mm.tooling.shape_world import read_classes
    study_tool = load_tool('study')
    study = study_tool.Study(str(tmp_path), 'quick', replicates=1)
    study.change(n_pretrain=4)
    study_tool.stage_world(study, 0)
    classes = read_classes(tmp_path / 'rep0' / 'world')

    cfgs = {run: study.run_config(f'rep0/{run}')[1]
            for run in ('perceptual', 'judge', 'cls_peco', 'cls_pixel', 'tokenizer_clsloss',
                        'cls_clsloss')}

    def read(run, loader):
        with DefaultScope.overwrite_default_scope('mmpretrain'):  # whatever ran before
            ds = DATASETS.build(dict(cfgs[run][loader].dataset, lazy_init=False))
        return {ds.CLASSES[ds.get_data_info(i)['gt_label']] for i in range(len(ds))}
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        seen = read('perceptual', loader)
        assert seen == set(classes['A']) and not seen & set(classes['B'])
    cls_tok = cfgs['tokenizer_clsloss']
    assert read('tokenizer_clsloss', 'train_dataloader') == set(classes['A'])
    assert cls_tok.model.perceptual_weight == 0
    assert cls_tok.model.codeword_loss == 'classification'
    assert cls_tok.model.codeword_loss_cfg.num_classes == len(classes['A'])
    for run in ('judge', 'cls_peco', 'cls_pixel', 'cls_clsloss'):
        assert read(run, 'train_dataloader') == set(classes['B'])
    assert read('judge', 'test_dataloader') == set(classes['B'])
    tok = study.run_config('rep0/tokenizer_lambda1')[1]
    assert tok.test_dataloader.dataset.data_prefix == 'test'
    assert tok.test_dataloader.dataset.data_root == str(tmp_path / 'rep0' / 'world' / 'cls')


def test_no_run_of_a_replicate_reads_another_replicates_world_or_networks(tmp_path):
    """Replicate r writes only under rep<r>/, draws its world with seed r and seeds every
    run with r; the stages hand each run only its own replicate's checkpoints."""
    from tests.conftest import load_tool
    study_tool = load_tool('study')
    study = study_tool.Study(str(tmp_path), 'full')
    assert study.replicates == list(range(8))
    runs = [d for d, *_ in study.plan.runs]
    tuning = [d for d, *_ in study.runs(study_tool.TUNING_SEED)]  # the scratch lr grid's
    assert len(runs) == len(set(runs)) == 8 * len(study.runs(0)) + len(tuning)
    assert len(tuning) == 6 and all(d.startswith('tuning/') for d in tuning)
    assert study_tool.TUNING_SEED not in study.replicates
    for r in study.replicates:
        assert all(d.startswith(f'rep{r}/') for d, *_ in study.runs(r))
    calls = {}

    def record(run_dir, options=None, evaluate=None):
        calls[run_dir] = dict(options or {})
        return dict(ckpt=f'{tmp_path}/{run_dir}/last.pth', config=f'{run_dir}/c.py',
                    metrics=dict(pecovit=f'{tmp_path}/{run_dir}/net.pth'))
    study.run = record
    for r in (0, 3):
        nets = {k: record(study.rep(r, k)) for k in ('perceptual', 'judge', 'random')}
        toks = study_tool.stage_tokenizers(study, r, nets)
        study_tool.stage_downstream(study, r, study_tool.stage_pretrain(study, r, toks))
    for run_dir, opts in calls.items():
        r = run_dir.split('/')[0]
        paths = [v for v in opts.values() if isinstance(v, str) and '/' in v]
        assert all(f'/{r}/' in v or v.startswith(f'{r}/') for v in paths), (run_dir, opts)
    assert calls['rep3/tokenizer_random']['model.perceptual.checkpoint'] == \
        f'{tmp_path}/rep3/random/net.pth'
    cfg = study.run_config('rep3/pretrain_peco')[1]
    assert cfg.randomness.seed == 3
    assert cfg.train_dataloader.dataset.data_root.startswith(str(tmp_path / 'rep3'))


def test_scratch_rows_have_their_own_recipe_and_a_compute_matched_schedule(tmp_path):
    from tests.conftest import load_tool
    study_tool = load_tool('study')
    study = study_tool.Study(str(tmp_path), 'demo')
    it = study.p['iters']
    runs = {d.split('/')[1]: (c, n) for d, c, _, n in study.runs(0)}
    assert runs['cls_scratch'] == ('finetune_vit_tiny_world_scratch.py', it['cls'])
    assert runs['cls_scratch_matched'][1] == it['cls'] + it['pretrain']
    assert runs['seg_scratch_matched'] == ('upernet_vit_tiny_world_scratch.py',
                                           it['seg'] + it['pretrain'])
    scratch = study.run_config('rep0/cls_scratch')[1]
    peco = study.run_config('rep0/cls_peco')[1]
    assert scratch.model.backbone.init_cfg is None
    assert scratch.optim_wrapper.paramwise_cfg.layer_decay_rate == 1.0
    assert peco.optim_wrapper.paramwise_cfg.layer_decay_rate == 0.65
    assert scratch.optim_wrapper.optimizer.lr != peco.optim_wrapper.optimizer.lr
    # --perceptual mocov3: the loss's network learns without labels (the judge is unchanged)
    moco = study_tool.Study(str(tmp_path), 'full', perceptual='mocov3')
    assert moco.runs(5)[:2] == [('rep5/perceptual', 'mocov3_vit_tiny_world.py', 'mocov3', 900),
                                ('rep5/judge', 'judge_resnet_world.py', 'judge', 400)]
    with pytest.raises(ValueError, match="perceptual='vgg'"):
        study_tool.Study(str(tmp_path), 'quick', perceptual='vgg')


def test_command_line_replicates_iterations_and_jobs(tmp_path, monkeypatch):
    """--iters replaces stages' schedules and a typo is refused; --jobs N starts N processes
    of the tool, each on its own replicates, none with --jobs N again."""
    from tests.conftest import load_tool
    study_tool = load_tool('study')
    args = study_tool.parse_args(['--profile', 'quick', '--no-rotation',
                                  '--iters', 'perceptual=5,tokenizer=3', '--jobs', '3'])
    assert args.rotation is False and args.iters == dict(perceptual=5, tokenizer=3)
    assert study_tool.parse_args(['--only-replicates', '1,4']).only_replicates == [1, 4]
    for bad in (['--iters', 'percep=5'], ['--iters', 'tokenizer=0'], ['--jobs', '0'],
                ['--only-replicates', 'x'], ['--replicates', '0']):
        with pytest.raises(SystemExit):
            study_tool.parse_args(bad)
    started = []

    class Proc:
        def __init__(self, cmd):
            started.append(cmd)

        def wait(self):
            return 0
    monkeypatch.setattr(study_tool.subprocess, 'Popen', Proc)
    argv = study_tool.strip_jobs(['--profile', 'demo', '--jobs', '3', '--device', 'cuda'])
    assert argv == ['--profile', 'demo', '--device', 'cuda']
    study_tool.run_jobs(argv, list(range(8)), 3)
    assert [c[c.index('--only-replicates') + 1] for c in started] == ['0,3,6', '1,4,7', '2,5']
    assert all(c.count('--jobs') == 1 and c[c.index('--jobs') + 1] == '1' for c in started)


def test_geometry_pair_views_take_the_second_view_from_the_partner_file(tmp_path):
    """View 1 is the loaded image through the first pipeline, view 2 the same-named file of
    the sibling folder through the second; a missing partner is named."""
    import mmcv
    from mmcv.transforms import LoadImageFromFile

    from peco_mm.datasets.pair_views import GeometryPairViews
    from peco_mm.tooling.shape_world import write_pairs
    root = tmp_path / 'a'  # a folder named like the first side above the pairs' root
    write_pairs(root, 2, 32, seed=0, held_out=False, inner='unlabeled')
    keep = [dict(type='RandomFlip', prob=0.0)]
    t = GeometryPairViews(transforms=[keep, keep])
    out = t(LoadImageFromFile()(dict(img_path=str(root / 'a' / 'unlabeled' / '00001.png'))))
    a, b = (mmcv.imread(str(root / s / 'unlabeled' / '00001.png')) for s in 'ab')
    assert np.array_equal(out['img'][0], a) and np.array_equal(out['img'][1], b)
    assert not np.array_equal(a, b)
    (root / 'b' / 'unlabeled' / '00000.png').unlink()
    with pytest.raises(FileNotFoundError, match=r'00000.png has no partner file .*a/b/unl'):
        t(LoadImageFromFile()(dict(img_path=str(root / 'a' / 'unlabeled' / '00000.png'))))
    with pytest.raises(ValueError, match='expected 2'):
        GeometryPairViews(transforms=[keep])
    with pytest.raises(ValueError, match='two different folders'):
        GeometryPairViews(transforms=[keep, keep], pair_dirs=('a', 'a'))


def test_pairs_perceptual_network_reads_unlabeled_geometry_pairs(tmp_path):
    """--perceptual pairs: the world gains unlabeled training pairs of all classes under the
    training nuisances, and the network's two views come from the two files of a pair."""
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import DATASETS

    from tests.conftest import load_tool
    study_tool = load_tool('study')
    study = study_tool.Study(str(tmp_path), 'quick', replicates=1, perceptual='pairs')
    study.change(n_pretrain=4)
    assert study.runs(0)[0][1] == 'mocov3_pairs_vit_tiny_world.py'
    assert study_tool.stage_world(study, 0)['n_train_pairs'] == 4
    pairs = tmp_path / 'rep0' / 'world' / 'pretrain_pairs'
    assert len(list((pairs / 'b' / 'unlabeled').glob('*.png'))) == 4
    cfg = study.run_config('rep0/perceptual')[1].train_dataloader.dataset
    assert cfg.with_label is False
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        ds = DATASETS.build(cfg)
        sample = ds[0]
    assert ds.get_data_info(0)['img_path'].startswith(str(pairs / 'a'))
    assert len(sample['inputs']) == 2 and sample['inputs'][0].shape == (3, 32, 32)


def test_a_run_keeps_numpy_metrics_as_plain_numbers(tmp_path, monkeypatch):
    """numpy 2 keeps mmseg's mIoU a float32, which json refuses: the result is still written,
    with the number, and an object json cannot hold is still refused."""
    import json
    from pathlib import Path

    import peco_mm.supervisor.launch as launch
    from tests.conftest import load_tool
    study = load_tool('study').Study(str(tmp_path), 'quick')

    def train(config, work_dir, mode):
        (Path(work_dir) / 'last_checkpoint').write_text('iter_2.pth')
    monkeypatch.setattr(launch, 'run', train)
    res = study.run('rep0/seg_peco', evaluate=lambda res: {'mIoU': np.float32(34.5),
                                                           'aAcc': np.float64(0.25)})
    assert res['metrics'] == {'mIoU': 34.5, 'aAcc': 0.25}
    stored = json.loads((tmp_path / 'rep0' / 'seg_peco' / 'result.json').read_text())
    assert stored['metrics'] == {'mIoU': 34.5, 'aAcc': 0.25}
    with pytest.raises(TypeError, match='object is not JSON serializable'):
        study.run('rep0/seg_pixel', evaluate=lambda res: {'mIoU': object()})


def test_dvae_row_trains_the_gumbel_quantizer_like_the_pixel_codebook(tmp_path):
    """The dVAE tokenizer is the lambda = 0 tokenizer with the Gumbel-softmax quantizer: the
    same unlabeled images, encoder, decoder, K and grid; its temperature anneals over the
    run's iterations whatever the profile; PeCo-style pretraining reads its codes."""
    from tests.conftest import load_tool
    study_tool = load_tool('study')
    study = study_tool.Study(str(tmp_path), 'full')
    assert 'dvae' in study.tokenizers and 'dvae' in study.targets
    dvae = study.run_config('rep2/tokenizer_dvae')[1]
    pixel = study.run_config('rep2/tokenizer_lambda0')[1]
    q = dvae.model.quantizer
    assert (q.type, q.num_embeddings, q.embed_dims) == ('GumbelQuantizer', 128, 32)
    assert q.anneal_iters == dvae.train_cfg.max_iters == study.p['iters']['tokenizer']
    assert (q.tau_start, q.tau_end) == (1.0, 1 / 16) and 0 < q.kl_weight <= 0.01
    assert dvae.model.perceptual_weight == pixel.model.perceptual_weight == 0
    for key in ('encoder', 'decoder'):
        assert dvae.model[key] == pixel.model[key]
    assert dvae.train_dataloader.dataset == pixel.train_dataloader.dataset
    assert pixel.model.quantizer.num_embeddings == q.num_embeddings
    calls = {}
    study.run = lambda run_dir, options=None, evaluate=None: calls.setdefault(
        run_dir, dict(options or {}, ckpt=f'{run_dir}/last.pth'))
    study_tool.stage_pretrain(study, 2, {k: dict(ckpt=f'tok_{k}.pth') for k in study.tokenizers})
    assert calls['rep2/pretrain_dvae']['model.target_generator.checkpoint'] == 'tok_dvae.pth'


def test_scratch_lr_is_chosen_on_the_tuning_world_and_used_by_every_scratch_row(
        tmp_path, monkeypatch):
    """Each lr of the grid trains once on a world no replicate draws (seed 1000) and is
    scored on its tuning half; the best (the first of equals) is the lr of every replicate's
    scratch rows, own recipe and compute-matched; the report's stage check gives the grid,
    the scores and the choice."""
    from tests.conftest import load_tool
    from peco_mm.tooling import study_stages
    from peco_mm.tooling.study_tuning import tuning_line
    study_tool = load_tool('study')
    study = study_tool.Study(str(tmp_path), 'full', replicates=2)
    seed = study_tool.TUNING_SEED
    cfg = study.run_config('tuning/cls_scratch_lr0.002')[1]
    assert cfg.randomness.seed == seed and cfg.val_dataloader.dataset.data_prefix == 'val'
    assert cfg.val_dataloader.dataset.data_root == str(tmp_path / 'tuning' / 'world' / 'cls')
    assert cfg.train_cfg.max_iters == study.p['iters']['cls']
    assert cfg.optim_wrapper.paramwise_cfg.layer_decay_rate == 1.0
    seg = study.run_config('tuning/seg_scratch_lr0.0005')[1]
    assert seg.val_dataloader.dataset.data_prefix.img_path.endswith('validation')
    worlds = []
    monkeypatch.setattr(study_stages, 'stage_world',
                        lambda study, r, **sizes: worlds.append(r) or {})
    score = {'cls_scratch_lr0.001': 30.0, 'cls_scratch_lr0.002': 45.0,
             'cls_scratch_lr0.005': 20.0, 'seg_scratch_lr0.0005': 10.0,
             'seg_scratch_lr0.001': 12.0, 'seg_scratch_lr0.002': 12.0}
    calls = {}

    def record(run_dir, options=None, evaluate=None):
        calls[run_dir] = dict(options or {})
        name = run_dir.split('/')[1]
        return dict(ckpt=f'{run_dir}/last.pth',
                    metrics={'accuracy/top1' if name.startswith('cls') else 'mIoU':
                             score.get(name)})
    study.run = record
    tuning = study_tool.stage_tuning(study)
    assert worlds == [seed]
    assert calls['tuning/cls_scratch_lr0.005'] == {'optim_wrapper.optimizer.lr': 5e-3}
    assert (tuning['cls']['chosen'], tuning['seg']['chosen']) == (2e-3, 1e-3)
    assert study.scratch_lr == tuning
    study_tool.stage_downstream(study, 1, {t: dict(ckpt=f'{t}.pth') for t in study.targets})
    for task, lr in (('cls', 2e-3), ('seg', 1e-3)):
        for init in ('scratch', 'scratch_matched'):
            assert calls[f'rep1/{task}_{init}'] == {'optim_wrapper.optimizer.lr': lr}
        assert calls[f'rep1/{task}_peco'] == {'model.backbone.init_cfg.checkpoint': 'peco.pth'}
    line = tuning_line(tuning)
    assert 'seed 1000' in line and 'few-label top-1 0.001: 30.0 %, 0.002: 45.0 %, 0.005: ' \
        '20.0 % (chosen: 0.002); mIoU 0.0005: 10.0 %, 0.001: 12.0 %, 0.002: 12.0 % ' \
        '(chosen: 0.001)' in line


def test_self_supervised_network_trains_beside_the_supervised_one_for_its_1nn(tmp_path):
    """--knn-networks pairs: each replicate also trains the geometry-pairs MoCo v3 (its world
    gains the training pairs) for its 1-NN shape accuracy only (the quick profile by
    default); no tokenizer reads it, and a study whose loss network is that kind trains it
    once."""
    from tests.conftest import load_tool
    study_tool = load_tool('study')
    args = study_tool.parse_args(['--knn-networks', 'pairs'])
    assert args.knn_networks == ('pairs', )
    for bad in ('supervised', 'vgg'):
        with pytest.raises(SystemExit):
            study_tool.parse_args(['--knn-networks', bad])
    full = study_tool.Study(str(tmp_path), 'full')
    assert full.knn_networks == ()
    full.change(knn_networks=args.knn_networks)
    assert full.knn_networks == ('pairs', )
    assert full.runs(4)[:3] == [
        ('rep4/perceptual', 'perceptual_vit_tiny_world.py', 'perceptual', 600),
        ('rep4/judge', 'judge_resnet_world.py', 'judge', 400),
        ('rep4/perceptual_pairs', 'mocov3_pairs_vit_tiny_world.py', 'mocov3', 900)]
    assert study_tool.Study(str(tmp_path), 'demo').knn_networks == ()
    assert study_tool.Study(str(tmp_path), 'quick').knn_networks == ('pairs', )
    pairs = study_tool.Study(str(tmp_path), 'quick', perceptual='pairs')
    assert pairs.knn_networks == () and 'rep0/perceptual_pairs' not in [
        d for d, *_ in pairs.runs(0)]
    quick = study_tool.Study(str(tmp_path), 'quick', replicates=1)
    quick.change(n_pretrain=4)
    assert study_tool.stage_world(quick, 0)['n_train_pairs'] == 4
    cfg = quick.run_config('rep0/perceptual_pairs')[1].train_dataloader.dataset
    assert cfg.data_root == str(tmp_path / 'rep0' / 'world' / 'pretrain_pairs')
    calls = {}
    quick.run = lambda run_dir, options=None, evaluate=None: calls.setdefault(
        run_dir, dict(options or {}, ckpt=f'{run_dir}/last.pth'))
    nets = {k: dict(metrics=dict(pecovit=f'{k}.pth')) for k in ('perceptual', 'random')}
    study_tool.stage_tokenizers(quick, 0, dict(nets, judge=dict(ckpt='j.pth', config='j.py')))
    assert {o['model.perceptual.checkpoint'] for o in calls.values()} == {
        'perceptual.pth', 'random.pth'}
