"""The study's pieces that must hold whatever the numbers: the shape world is deterministic
and in the host layouts, and the report's conclusions are written from, and checked against,
its tables."""
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from peco_mm.tooling.study_report import (cell, check_report, comparison, markdown_table,
                                          parse_cell, verdict)


def test_verdict_names_every_consistent_sign_for_or_against():
    assert verdict([1.0, 2.0, 0.5], 1) == ('higher in 3 of 3 seeds (mean +1.2): consistent, '
                                           'as the paper expects')
    assert verdict([-1.0, -2.0, -0.5], 1).endswith('consistent, against the paper')
    assert verdict([-1.0, -2.0, -0.5], -1).endswith('consistent, as the paper expects')
    assert verdict([0.1, 0.2], 0).endswith('consistent')
    assert verdict([0.0, 0.0, 0.0], 1) == ('equal in 3 of 3 seeds: no difference at the '
                                           'precision shown')
    mixed = verdict([1.0, -1.0, 0.0], 1)
    assert mixed.startswith('higher in 1, lower in 1, equal in 1 of 3') and 'undecided' in mixed


def test_cells_round_trip_and_comparisons_use_the_shown_values():
    assert cell([1.04, 2.0, 3.0]) == '2.0 ± 1.0 (1.0, 2.0, 3.0)'
    assert parse_cell(cell([1.04, 2.0, 3.0])) == [1.0, 2.0, 3.0]
    assert parse_cell('—') == [] and parse_cell('7.5') == [7.5]
    # 1.04 - 1.0 shows as 0.0: the conclusion calls it equal, as a reader of the table would
    line = comparison('T', 'c', 'a', 'b', [1.04, 3.0], [1.0, 2.0], 1)
    assert 'per seed +0.0, +1.0: a higher in 1, lower in 0, equal in 1 of 2' in line


def report(a, b, expect=1):
    table = markdown_table('T4', ['probe (%)'], {'PeCo': [cell(a)], 'pixel': [cell(b)]})
    return table + '\n\n' + comparison('T4', 'probe (%)', 'PeCo', 'pixel', a, b, expect) + '\n'


def test_check_report_accepts_its_own_report_and_catches_contradictions():
    good = report([30.0, 35.0, 32.0], [10.0, 12.0, 11.0])
    assert check_report(good) == []
    # a sentence that claims the opposite sign, a wrong seed count, a changed table cell
    assert check_report(good.replace('higher in 3 of 3', 'lower in 3 of 3'))
    assert check_report(good.replace('as the paper expects', 'against the paper'))
    assert check_report(good.replace('(30.0, 35.0, 32.0)', '(30.0, 5.0, 32.0)'))
    assert check_report(good.replace('|pixel|', '|scratch|'))  # a row the tables lack
    against = report([10.0, 12.0, 11.0], [30.0, 35.0, 32.0])
    assert check_report(against) == [] and 'against the paper' in against


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


def test_report_compares_every_trained_row_with_chance(tmp_path):
    """The downstream table ends with a chance row, every trained row is compared with it in
    every column it has, and the conclusions agree with the tables (check_report)."""
    from tests.conftest import load_tool
    from peco_mm.tooling.study_report import parse_tables
    study_tool = load_tool('study')
    study = study_tool.Study(str(tmp_path), 'quick', seeds=3)
    tok = {'tokenizer/psnr': 20.0, 'tokenizer/ssim': 0.5, 'tokenizer/perceptual': 1.0,
           'tokenizer/codeword_probe_acc': 30.0, 'tokenizer/recon_cls_acc': 40.0,
           'tokenizer/usage': 0.9}
    res = dict(
        tokenizers={(lam, s): dict(metrics=dict(tok, **{'tokenizer/psnr': 20.0 + s + lam}))
                    for lam in study.lambdas for s in study.seeds},
        pretrain={(t, s): dict(metrics=dict(mim_acc=5.0 + s)) for t in ('peco', 'pixel')
                  for s in study.seeds},
        downstream={(task, init, s): dict(metrics={'accuracy/top1': 9.0 + 2 * s,
                                                   'mIoU': 30.0 + s})
                    for task in ('cls', 'seg') for init in study_tool.INITS
                    for s in study.seeds})
    chance = {'accuracy/top1': 10.0, 'mIoU': 4.0, 'mim_acc': 100 / 128}
    tables, conclusions = study_tool.report_tables(study, res, chance)
    text = '\n\n'.join(tables) + '\n\n' + '\n'.join(conclusions) + '\n'
    assert check_report(text) == []
    down = parse_tables(text)[study_tool.T23]
    assert down['chance (a model that learned nothing)']['few-label top-1 (%)'] == \
        '10.0 ± 0.0 (10.0, 10.0, 10.0)'
    vs_chance = [c for c in conclusions if '|chance (a model' in c]
    assert len(vs_chance) == 3 * 2 + 2  # 3 inits x (top-1, mIoU) + MIM accuracy of 2 targets
    # top-1 9, 11, 13 against 10: not consistently above chance; mIoU 30-32 against 4: learned
    top1 = next(c for c in vs_chance if '|scratch|' not in c and 'top-1' in c)
    assert 'higher in 2, lower in 1' in top1 and 'undecided' in top1
    assert all('consistent, as the paper expects' in c for c in vs_chance if 'mIoU' in c)


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
