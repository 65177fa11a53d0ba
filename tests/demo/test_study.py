"""The study's pieces that must hold whatever the numbers: the shape world is deterministic
and in the host layouts, and the report's conclusions are written from, and checked against,
its tables."""
from pathlib import Path

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
    from peco_mm.tooling.shape_world import CLASSES, make_world
    kw = dict(n_pretrain=12, per_class=1, val_per_class=2, judge_per_class=1)
    a = make_world(tmp_path / 'a', **kw)
    make_world(tmp_path / 'b', **kw)
    fa = sorted(p.relative_to(tmp_path / 'a') for p in (tmp_path / 'a').rglob('*.png'))
    fb = sorted(p.relative_to(tmp_path / 'b') for p in (tmp_path / 'b').rglob('*.png'))
    assert fa == fb and len(fa) == 12 + 10 + 10 + 20 + 2 * (10 + 20)
    assert all((tmp_path / 'a' / r).read_bytes() == (tmp_path / 'b' / r).read_bytes()
               for r in fa)
    assert sorted(p.name for p in (a['cls'] / 'val').iterdir()) == sorted(CLASSES)
    # per-pixel masks: background 1, class k at 2 + k, never 0 (reduce_zero_label)
    ann = sorted((a['ade'] / 'annotations' / 'validation').glob('*.png'))
    labels = [np.asarray(Image.open(f)) for f in ann]
    assert all(set(np.unique(m)) == {1, 2 + i // 2} for i, m in enumerate(labels))
    img = np.asarray(Image.open(sorted((a['ade'] / 'images' / 'validation').glob('*'))[0]))
    assert img.shape == (32, 32, 3) and img.std() > 10


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


def study_results(study, inits):
    """Recorded metrics of every run of `study` (no training): the PeCo rows' few-label top-1
    1, 2, 0, 1.5, 1 points above the pixel codebook's; everything else equal between rows."""
    tok = {'tokenizer/psnr': 20.0, 'tokenizer/ssim': 0.5, 'tokenizer/perceptual': 1.0,
           'tokenizer/codeword_probe_acc': 30.0, 'tokenizer/recon_cls_acc': 40.0,
           'tokenizer/usage': 0.9}
    lead = [1.0, 2.0, 0.0, 1.5, 1.0] * 2
    return dict(
        tokenizers={(lam, s): dict(metrics=dict(tok, **{'tokenizer/psnr': 20.0 + s + lam}))
                    for lam in study.lambdas for s in study.seeds},
        pretrain={(t, s): dict(metrics=dict(mim_acc=5.0 + s)) for t in study.targets
                  for s in study.seeds},
        downstream={(task, init, s): dict(metrics={
            'accuracy/top1': 9.0 + 2 * s + (lead[s] if init == 'peco' else 0.0),
            'mIoU': 30.0 + s}) for task in ('cls', 'seg') for init in inits
            for s in study.seeds})


def test_report_compares_every_trained_row_with_chance(tmp_path):
    """The downstream table ends with a chance row, every trained row is compared with it in
    every column it has, the three primary endpoints are stated once each, every verdict is
    an interval's, and the conclusions agree with the tables (check_report); with 3
    replicates no line gives a verdict."""
    from tests.conftest import load_tool
    study_tool = load_tool('study')
    study = study_tool.Study(str(tmp_path), 'quick', seeds=5)
    chance = {'accuracy/top1': 10.0, 'mIoU': 4.0, 'mim_acc': 100 / 128}
    tables, conclusions = study_tool.report_tables(
        study, study_results(study, study_tool.INITS), chance)
    text = '\n\n'.join(tables) + '\n\n' + '\n'.join(conclusions) + '\n'
    assert check_report(text) == []
    down = parse_tables(text)[study_tool.T23]
    assert down['chance (a model that learned nothing)']['few-label top-1 (%)'] == \
        '10.0 ± 0.0 (10.0, 10.0, 10.0, 10.0, 10.0)'
    vs_chance = [c for c in conclusions if '|chance (a model' in c]
    assert len(vs_chance) == 3 * 2 + 2  # 3 inits x (top-1, mIoU) + MIM accuracy of 2 targets
    # top-1 9, 11, ..., 17 against 10: chance is inside; mIoU 30-34 against 4: learned
    top1 = next(c for c in vs_chance if '|pixel' in c and 'top-1' in c)
    assert 'per replicate -1.0, +1.0, +3.0, +5.0, +7.0' in top1 and 'excludes' not in top1
    assert all(c.endswith("excludes 0 in the paper's direction") for c in vs_chance
               if 'mIoU' in c)
    primary = {c[3:5]: c for c in conclusions if c.startswith('- [P')}
    assert sorted(primary) == ['P1', 'P2', 'P3']
    assert primary['P1'].startswith('- [P1|Table 4: tokenizers|codeword probe (%)|lambda = 1')
    assert primary['P2'].startswith('- [P2|Tables 2-3: pretraining and downstream|few-label '
                                    'top-1 (%)|PeCo (lambda = 1 codes)|pixel codebook')
    assert 'per replicate +1.0, +2.0, +0.0, +1.5, +1.0: mean +1.10' in primary['P2']
    assert primary['P2'].endswith("excludes 0 in the paper's direction")
    assert primary['P3'].endswith(': includes 0') and primary['P1'].endswith(': includes 0')
    assert not any('consistent' in c or 'seeds' in c for c in conclusions)
    few = study_tool.Study(str(tmp_path), 'quick', seeds=3)
    _, lines = study_tool.report_tables(few, study_results(few, study_tool.INITS), chance)
    assert all(c.endswith('too few replicates for a verdict (3; 5 needed)') for c in lines
               if c.startswith('- ['))
    assert lines[0].startswith(f'**{ENDPOINTS}**') and lines[0].count('too few') == 3


def test_study_exits_when_its_report_contradicts_its_numbers(tmp_path, monkeypatch):
    """tools/study.py checks the report it writes: a conclusion that disagrees with its
    tables stops it with a non-zero status naming report.md (the report as written stays)."""
    from tests.conftest import load_tool
    tool = load_tool('study')
    study = tool.Study(str(tmp_path), 'quick', seeds=5)
    res = study_results(study, tool.INITS)
    chance = {'accuracy/top1': 10.0, 'mIoU': 4.0, 'mim_acc': 0.8}
    net = {'trained': 50.0, 'random': [10.0, 11.0], 'accuracy/top1': 60.0}
    res.update(world=dict(n_pretrain=8, val_per_class=1),
               nets={k: dict(metrics=net) for k in ('loss_net', 'measure', 'judge')})
    monkeypatch.setattr(tool, 'chance_levels', lambda study: chance)
    monkeypatch.setattr(tool, 'reconstruction_grid', lambda study, res: tmp_path / 'grid.png')
    monkeypatch.setattr('peco_mm.utils.image.find_images', lambda root: ['x.png'] * 100)
    load = dict(cpus=2, start=(0.1, 0, 0), end=(1.0, 0, 0))
    report = tool.write_report(study, res, 'test', 60.0, load)
    assert check_report(report.read_text()) == [] and CONCLUSIONS_INTRO in report.read_text()
    tables, lines = tool.report_tables(study, res, chance)
    lines = [c.replace("excludes 0 in the paper's direction", 'includes 0') for c in lines]
    monkeypatch.setattr(tool, 'report_tables', lambda study, res, chance: (tables, lines))
    with pytest.raises(SystemExit) as exit_:
        tool.write_report(study, res, 'test', 60.0, load)
    assert exit_.value.code not in (0, None) and str(report) in exit_.value.code


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


def test_supervised_perceptual_network_feeds_the_tokenizers(tmp_path):
    """--perceptual supervised: a ViT trained on the judge split (seed 1) is converted and
    becomes the tokenizers' perceptual network, in place of MoCo v3; the judge (seed 0),
    converted too, measures their perceptual distance (quick profile, 2 steps)."""
    from mmengine.config import Config

    from tests.conftest import load_tool
    study_tool = load_tool('study')
    study = study_tool.Study(str(tmp_path), 'quick', seeds=1, perceptual='supervised')
    assert [r[0] for r in study.plan.runs[:3]] == ['supervised', 'judge', 'tokenizer_lambda0_seed0']
    study_tool.stage_world(study)
    nets = study_tool.stage_networks(study)
    loss, measure = nets['loss_net']['metrics'], nets['measure']['metrics']
    assert nets['loss_net'] is nets['supervised'] and nets['measure'] is nets['judge']
    assert 'mocov3' not in nets and 'mocov3_measure' not in nets
    assert Path(loss['pecovit']).is_file() and 0 <= loss['trained'] <= 100
    assert Path(measure['pecovit']).is_file() and measure['pecovit'] != loss['pecovit']
    assert 'accuracy/top1' in loss and len(loss['random']) == 3
    assert 'accuracy/top1' in measure and len(measure['random']) == 3
    assert Config.fromfile(nets['supervised']['config']).randomness.seed == 1
    assert Config.fromfile(nets['judge']['config']).randomness.seed == 0
    toks = study_tool.stage_tokenizers(study, nets)
    for (lam, seed), res in toks.items():
        cfg = Config.fromfile(res['config'])
        assert cfg.model.perceptual.checkpoint == loss['pecovit']
        assert cfg.test_evaluator.perceptual.checkpoint == measure['pecovit']
        assert 'tokenizer/codeword_probe_acc' in res['metrics']
    with pytest.raises(ValueError, match="perceptual='vgg'"):
        study_tool.Study(str(tmp_path), 'quick', perceptual='vgg')


def test_upright_world_and_stage_iterations_from_the_command_line(tmp_path):
    """--no-rotation draws the study's world upright (and a world written with rotation is
    not reused for it); --iters replaces stages' schedules, and a typo is refused."""
    from tests.conftest import load_tool
    study_tool = load_tool('study')
    args = study_tool.parse_args(['--profile', 'quick', '--no-rotation',
                                  '--iters', 'mocov3=5,tokenizer=3'])
    assert args.rotation is False and args.iters == dict(mocov3=5, tokenizer=3)
    assert study_tool.parse_args(['--rotation']).rotation is True
    assert study_tool.parse_args([]).rotation is None  # the profile's
    assert study_tool.PROFILES['full']['rotate'] is False  # where MoCo v3 learns shape
    for bad in ('mocov=5', 'mocov3=0', 'mocov3', 'tokenizer=x'):
        with pytest.raises(SystemExit):
            study_tool.parse_args(['--iters', bad])
    study = study_tool.Study(str(tmp_path), 'quick', seeds=1)
    study.p = dict(study.p, n_pretrain=8, val_per_class=1, judge_per_class=1)
    rotated = study_tool.stage_world(study)
    assert 'rotate' not in rotated  # the recorded settings of worlds written before
    before = np.asarray(Image.open(next((tmp_path / 'world' / 'pretrain').rglob('*.png'))))
    study.change(iters=args.iters, rotate=False)
    assert study.p['iters']['mocov3'] == 5 and study.p['iters']['judge'] == 2
    assert study_tool.stage_world(study) == dict(rotated, rotate=False)
    after = np.asarray(Image.open(next((tmp_path / 'world' / 'pretrain').rglob('*.png'))))
    assert not np.array_equal(before, after)  # rewritten upright, not kept
    cfg = study.config('mocov3_vit_tiny_world.py', 'mocov3', 0)
    assert cfg.train_cfg.max_iters == 5
    # the recipe's colour shortcut is removed (see the config)
    jitter = cfg.train_pipeline[1].transforms[0][1]
    assert jitter.transforms[0].hue == 0.5 and cfg.train_pipeline[1].transforms[0][2].prob == 0.5
