"""`make demo` is tools/study.py's demo profile; here its `quick` profile runs end to end (every
run 2 iterations, 2 replicates): the console shows each run with an ETA, the report has its
sections, tables with both replicates, conclusions that agree with the tables (check_report,
which the tool runs itself), each run reads the checkpoints its own replicate's producers
wrote and nothing of the other replicate, and a second call keeps every finished run."""
import re

import numpy as np
import pytest
from PIL import Image

from peco_mm.tooling.study_report import ENDPOINTS
from tests.conftest import ROOT, load_tool, run_tool

SECTIONS = ['## Stage checks', '**Table 4: tokenizers**',
            '**Tables 2-3: pretraining and downstream**', '## Conclusions',
            f'**{ENDPOINTS}**', '## Reconstructions']
# networks (with the 1-NN check's MoCo v3 on pairs), tokenizers, pretraining, 5 rows x 2 tasks
RUNS_PER_REPLICATE = 3 + 5 + 4 + 5 * 2
TUNING_RUNS = 2 * 2  # the scratch lr grid on the tuning world: 2 lrs x 2 tasks, once


@pytest.fixture(scope='module')
def quick_study(tmp_path_factory):
    wd = tmp_path_factory.mktemp('study')
    # held to the supervised design's plan: its roles, and exploratory lines for the rows and
    # columns added after it (Table 6's control, the dVAE, the re-pairing floor)
    proc = run_tool(['tools/study.py', '--profile', 'quick', '--work-dir', wd,
                     '--plan', 'docs/plans/shape_world_supervised.md',
                     '--results', wd / 'results'], timeout=900)
    return wd, proc.stdout + proc.stderr


def test_make_demo_runs_the_studys_demo_profile():
    """The Makefile's demo target is the study's demo profile: replicates that each train the
    supervised perceptual network (on A) and the judge (a ResNet, on B), no MoCo v3."""
    make = (ROOT / 'Makefile').read_text()
    assert re.search(r'^demo: install\n\t\$\(PY\) tools/study.py --profile demo '
                     r'--work-dir \$\(WORK_DIR\)', make, re.M)
    tool = load_tool('study')
    study = tool.Study('/tmp/unused', 'demo')
    assert study.perceptual == 'supervised' and len(study.replicates) >= 3
    runs = [r[0] for r in study.plan.runs]
    assert runs[6:8] == ['rep0/perceptual', 'rep0/judge'] and not any('mocov3' in r for r in runs)
    # nets, tokenizers (lambda 0 and 1, the random network's), pretraining, 4 downstream rows
    # x 2 tasks: Table 6's control and the dVAE run in the full profile only
    assert 'clsloss' not in study.inits and 'dvae' not in study.inits
    per = 2 + 3 + 2 + 2 * 4
    assert len(runs) == per * len(study.replicates) + 2 * 3  # + the scratch lr grid, once
    grid = (('cls', ('0.001', '0.002', '0.005')), ('seg', ('0.0005', '0.001', '0.002')))
    assert runs[:6] == [f'tuning/{t}_scratch_lr{lr}' for t, lrs in grid for lr in lrs]
    assert study.runs(0)[1][1] == 'judge_resnet_world.py'


def test_quick_study_report_has_every_section_and_both_replicates(quick_study):
    from peco_mm.tooling.study_report import check_report, parse_cell, parse_tables
    wd, log = quick_study
    assert f'report: {wd / "report.md"} (checked)' in log
    # one line per run with an overall ETA; the runs' own logs go to their console.log
    runs = re.findall(r'\] run (\d+) of (\d+): .+ \((ETA [^)]+)\)$', log, re.M)
    n = 2 * RUNS_PER_REPLICATE + TUNING_RUNS
    assert [(int(k), int(m)) for k, m, _ in runs] == [(k, n) for k in range(1, n + 1)]
    assert runs[0][2] == 'ETA after the first run' and re.fullmatch(r'ETA \d+m\d\ds', runs[1][2])
    assert 'Iter(train)' not in log
    assert 'Iter(train)' in (wd / 'rep0' / 'pretrain_peco' / 'console.log').read_text()
    text = (wd / 'report.md').read_text()
    pos = [text.index(s) for s in SECTIONS]
    assert pos == sorted(pos)
    from peco_mm.tooling.study_plan import read_plan
    plan = read_plan(ROOT / 'docs' / 'plans' / 'shape_world_supervised.md')
    assert check_report(text, plan) == []
    assert f'Plan: `docs/plans/shape_world_supervised.md`, sha256 {plan.sha256}.' in text
    roles = {key: role for role, key in
             re.findall(r'^- \[(\w+)\|[^|]+\|([^|]+\|[^|]+\|[^|]+)\|', text, re.M)}
    assert roles['codeword probe (%)|lambda = 1 (PeCo)|lambda = 0 (pixel only)'] == 'P1'
    assert roles['few-label top-1 (%)|PeCo (lambda = 1 codes)|dVAE (Gumbel-softmax codes)'] \
        == 'exploratory'  # the dVAE row came after the plan
    assert roles['few-label top-1 (%)|PeCo (lambda = 1 codes)|scratch (own recipe)'] == \
        'secondary'
    # the same report held to a plan it was not written under: refused
    other = plan.__class__(**dict(plan.__dict__, sha256='0' * 64))
    assert any('the plan changed after the runs' in p for p in check_report(text, other))
    assert 'Labelled splits of B: 2 images per class to train on, 2 per class in a tuning' in text
    tables = parse_tables(text)
    down = tables['Tables 2-3: pretraining and downstream']
    assert list(down) == ['PeCo (lambda = 1 codes)', 'pixel codebook (lambda = 0 codes)',
                          'classification loss on codewords (Table 6 control codes)',
                          'dVAE (Gumbel-softmax codes)', 'scratch (own recipe)',
                          'chance (a model that learned nothing)']
    # the self-supervised network's 1-NN shape accuracy beside the loss network's
    knn = re.findall(r'^- Self-supervised network for comparison.+geometry-matched pairs.+'
                     r'1-NN shape accuracy on the held-out classes B \(test half\) (.+?) %',
                     text, re.M)
    assert len(knn) == 1 and len(parse_cell(knn[0])) == 2
    # the scratch lr: the grid's scores on the tuning world's tuning half and the choice
    assert re.search(r'^- Scratch learning rate: .+seed 1000.+few-label top-1 0\.001: '
                     r'[\d.]+ %, 0\.002: [\d.]+ % \(chosen: 0\.00[12]\); mIoU 0\.001: ',
                     text, re.M)
    chosen = re.search(r'top-1 .+?\(chosen: ([\d.]+)\)', text).group(1)
    scratch = (wd / 'rep1' / 'cls_scratch' / 'finetune_vit_tiny_world_scratch.py').read_text()
    assert f'lr={float(chosen)!r}' in scratch.replace(' ', '')
    for label, cells in down.items():
        for col, c in cells.items():
            if not (label.startswith('scratch') and col.startswith('MIM')):
                assert len(parse_cell(c)) == 2, (label, col, c)
    for cells in tables['Table 4: tokenizers'].values():
        assert all(len(parse_cell(c)) == 2 for c in cells.values()), cells
    data = __import__('json').loads((wd / 'endpoints.json').read_text())
    assert data['replicates'] == [0, 1] and data['comparisons'][0]['name'] == 'P1'
    assert data['plan'] == f'Plan: `docs/plans/shape_world_supervised.md`, sha256 {plan.sha256}.'
    assert all(len(c['a_values']) == len(c['b_values']) == 2 for c in data['comparisons'])
    assert (wd / 'report_files' / 'reconstructions.png').stat().st_size > 500


def test_each_run_reads_only_its_own_replicates_producers(quick_study):
    """Every config as run names files of its own replicate only; the tokenizers train
    against their replicate's converted perceptual network (the control against its random
    twin) and are judged by their replicate's judge; pretraining reads its replicate's
    tokenizer, fine-tuning its pretraining. The replicates' worlds differ."""
    from mmengine.config import Config
    wd, _ = quick_study
    for rep in ('rep0', 'rep1'):
        for f in (wd / rep).glob('*/*.py'):
            other = 'rep1' if rep == 'rep0' else 'rep0'
            assert f'{wd}/{other}/' not in f.read_text(), f
            assert Config.fromfile(str(f)).randomness.seed == int(rep[3:])

    def cfg(run, name):
        return Config.fromfile(str(wd / 'rep1' / run / name))
    last = {d: (wd / 'rep1' / d / 'last_checkpoint').read_text().strip()
            for d in ('tokenizer_lambda1', 'tokenizer_lambda0', 'pretrain_peco',
                      'pretrain_pixel', 'judge')}
    tok = cfg('tokenizer_lambda1', 'tokenizer_world.py')
    assert tok.model.perceptual.checkpoint == str(wd / 'rep1' / 'perceptual' /
                                                  'vit_tiny_pecovit.pth')
    assert tok.test_evaluator.classifier.checkpoint == last['judge']
    assert cfg('tokenizer_random', 'tokenizer_world.py').model.perceptual.checkpoint == str(
        wd / 'rep1' / 'perceptual_random' / 'vit_tiny_pecovit.pth')
    peco = cfg('pretrain_peco', 'pretrain_peco_world.py')
    assert peco.model.target_generator.checkpoint == last['tokenizer_lambda1']
    assert peco.model.target_generator.encode_bf16 is False
    pixel = cfg('pretrain_pixel', 'pretrain_pixel_world.py')
    assert pixel.model.target_generator.checkpoint == last['tokenizer_lambda0']
    seg = cfg('seg_pixel', 'upernet_vit_tiny_world.py')
    assert seg.model.backbone.init_cfg.checkpoint == last['pretrain_pixel']
    assert 'work_dirs/study' not in tok.pretty_text
    worlds = [(wd / r / 'world' / 'pretrain' / 'train' / 'unlabeled' / '00000.png').read_bytes()
              for r in ('rep0', 'rep1')]
    assert worlds[0] != worlds[1]


def test_reconstruction_grid_rows(quick_study):
    """Top row: one validation original per class, exactly; rows 2-3: reconstructions."""
    wd, _ = quick_study
    grid = np.asarray(Image.open(wd / 'report_files' / 'reconstructions.png'))[::3, ::3]
    first = sorted((wd / 'rep0' / 'world' / 'cls' / 'test').iterdir())[0]
    original = np.asarray(Image.open(sorted(first.glob('*.png'))[0]).convert('RGB'))
    pad = (grid.shape[0] - 3 * 32) // 4
    np.testing.assert_array_equal(grid[pad:pad + 32, pad:pad + 32], original)
    recon = grid[2 * pad + 32:2 * pad + 64, pad:pad + 32].astype(int)
    assert np.abs(recon - original).mean() > 1


def test_a_second_call_keeps_every_finished_run(quick_study):
    wd, _ = quick_study
    before = (wd / 'report.md').read_text()
    log = run_tool(['tools/study.py', '--profile', 'quick', '--work-dir', wd,
                    '--plan', 'docs/plans/shape_world_supervised.md'], timeout=300).stdout
    assert log.count('finished earlier, kept') == 2 * RUNS_PER_REPLICATE + TUNING_RUNS
    assert 'Iter(train)' not in log
    after = (wd / 'report.md').read_text()
    assert after.split('## Conclusions')[1] == before.split('## Conclusions')[1]


def test_bf16_targets_row_pretrains_on_the_same_tokenizer_in_bf16(tmp_path, monkeypatch):
    """--bf16-targets: per replicate one more pretraining, on the lambda = 1 tokenizer of that
    replicate with encode_bf16=True, fine-tuned like the others; its report row is compared
    with the fp32-target PeCo, with no direction claimed (the runs recorded, not trained)."""
    from peco_mm.tooling.study_report import check_report, parse_tables
    from tests.demo.test_study import fake_results
    tool = load_tool('study')
    study = tool.Study(str(tmp_path), 'quick', replicates=2, bf16_targets=True)
    assert study.inits[-1] == 'peco_bf16'
    assert 'rep1/pretrain_peco_bf16' in [r[0] for r in study.plan.runs]
    calls = {}

    def record(run_dir, options=None, evaluate=None):
        calls[run_dir] = dict(options or {})
        return dict(ckpt=f'{run_dir}/last.pth', metrics={})
    monkeypatch.setattr(study, 'run', record)
    toks = {k: dict(ckpt=f'tok_{k}_1.pth') for k in study.tokenizers}
    pre = tool.stage_pretrain(study, 1, toks)
    assert calls['rep1/pretrain_peco_bf16'] == {
        'model.target_generator.checkpoint': 'tok_lambda1_1.pth',
        'model.target_generator.encode_bf16': True}
    assert calls['rep1/pretrain_peco'] == {'model.target_generator.checkpoint':
                                           'tok_lambda1_1.pth'}
    tool.stage_downstream(study, 1, pre)
    assert calls['rep1/seg_peco_bf16'] == {
        'model.backbone.init_cfg.checkpoint': 'rep1/pretrain_peco_bf16/last.pth'}
    # the report: a row of its own, compared with fp32-target PeCo in every column
    tables, conclusions, _ = tool.report_tables(study, fake_results(study))
    text = '\n\n'.join(tables) + '\n\n' + '\n'.join(conclusions) + '\n'
    assert check_report(text) == []
    assert 'PeCo, targets encoded in bf16' in parse_tables(text)[tool.T23]
    vs_fp32 = [c for c in conclusions if '|PeCo, targets encoded in bf16|PeCo (lambda' in c]
    assert len(vs_fp32) == 3 and all('paper: no direction' in c for c in vs_fp32)


def test_committed_results_are_small_and_a_new_machine_continues_from_them(quick_study,
                                                                          tmp_path):
    """--results keeps each replicate's metrics (no path into the work dir) as it finishes;
    a call in an empty work dir reads them instead of training, and writes the same report."""
    import json
    wd, _ = quick_study
    results = wd / 'results'
    assert sorted(p.name for p in (results / 'replicates').iterdir()) == ['rep0.json', 'rep1.json']
    rec = (results / 'replicates' / 'rep1.json').read_text()
    assert str(wd) not in rec and '"ckpt"' not in rec
    assert json.loads(rec)['downstream']['cls/peco']['metrics']['accuracy/top1'] >= 0
    run = json.loads((results / 'run.json').read_text())
    assert run['plan'].startswith('Plan: `docs/plans/shape_world_supervised.md`, sha256 ')
    assert run['command'][:4] == ['python', 'tools/study.py', '--profile', 'quick']
    def body(text):  # the tables and conclusions (the header gives each call's wall time)
        return text[text.index('**Table 4'):text.index('## Reconstructions')]
    assert body((results / 'report.md').read_text()) == body((wd / 'report.md').read_text())
    # a fresh work dir, as on a restarted machine with only the committed files
    proc = run_tool(['tools/study.py', '--profile', 'quick', '--work-dir', tmp_path / 'again',
                     '--plan', 'docs/plans/shape_world_supervised.md', '--results', results],
                    timeout=300)
    log = proc.stdout + proc.stderr
    assert 'rep0: read from' in log and 'rep1: read from' in log and '] run 1 of' not in log
    new = (tmp_path / 'again' / 'report.md').read_text()
    old = (wd / 'report.md').read_text()
    assert body(new) == body(old)
