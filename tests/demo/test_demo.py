"""`make demo` is tools/study.py's demo profile; here its `quick` profile runs end to end (every
run 2 iterations, 2 seeds): the console shows each run with an ETA,
the report has its sections, tables with both seeds, conclusions that agree with the tables
(check_report), the runs read the checkpoints their producers wrote, and a second call keeps
every finished run."""
import re

import numpy as np
import pytest
from PIL import Image

from tests.conftest import ROOT, load_tool, run_tool

SECTIONS = ['## Stage checks', '**Table 4: tokenizers**',
            '**Tables 2-3: pretraining and downstream**', '## Conclusions', '## Reconstructions']


@pytest.fixture(scope='module')
def quick_study(tmp_path_factory):
    wd = tmp_path_factory.mktemp('study')
    proc = run_tool(['tools/study.py', '--profile', 'quick', '--work-dir', wd],
                    timeout=900)
    return wd, proc.stdout + proc.stderr


def test_make_demo_runs_the_studys_demo_profile():
    """The Makefile's demo target is the study's demo profile, which trains the supervised
    perceptual network and no MoCo v3 (it learns no shape at this scale), and measures the
    perceptual distance with the judge, never with the loss's own network."""
    make = (ROOT / 'Makefile').read_text()
    assert re.search(r'^demo: install\n\t\$\(PY\) tools/study.py --profile demo '
                     r'--work-dir \$\(WORK_DIR\)', make, re.M)
    tool = load_tool('study')
    study = tool.Study('/tmp/unused', 'demo')
    assert study.perceptual == 'supervised' and study.measure_run() == 'judge'
    runs = [r[0] for r in study.plan.runs]
    assert runs[:2] == ['supervised', 'judge'] and not any('mocov3' in r for r in runs)
    assert len(runs) == 2 + 3 * 2 + 3 * 2 + 3 * 2 * 3  # nets, tokenizers, pretraining, down
    assert tool.Study('/tmp/unused', 'full').perceptual == 'mocov3'


def test_quick_study_report_has_every_section_and_both_seeds(quick_study):
    from peco_mm.tooling.study_report import check_report, parse_cell, parse_tables
    wd, log = quick_study
    assert f'report: {wd / "report.md"}' in log
    # one line per run with an overall ETA; the runs' own logs go to their console.log
    runs = re.findall(r'\] run (\d+) of (\d+): .+ \((ETA [^)]+)\)$', log, re.M)
    n = 3 + 2 * 2 + 2 * 2 + 2 * 2 * 3  # nets, tokenizers, 2 pretraining targets, 3 inits
    assert [(int(k), int(m)) for k, m, _ in runs] == [(k, n) for k in range(1, n + 1)]
    assert runs[0][2] == 'ETA after the first run' and re.fullmatch(r'ETA \d+m\d\ds', runs[1][2])
    assert 'Iter(train)' not in log
    assert 'Iter(train)' in (wd / 'pretrain_peco_seed0' / 'console.log').read_text()
    text = (wd / 'report.md').read_text()
    pos = [text.index(s) for s in SECTIONS]
    assert pos == sorted(pos)
    assert check_report(text) == []
    # the quick world as written: 10 classes, drawn rotated, 10 few-label images per class
    assert ('10 shape classes, each at a random angle; few-label splits of 10 images per class'
            in text)
    tables = parse_tables(text)
    down = tables['Tables 2-3: pretraining and downstream']
    assert list(down) == ['PeCo (lambda = 1 codes)', 'pixel codebook (lambda = 0 codes)',
                          'scratch',
                          'chance (a model that learned nothing)']
    for label, cells in down.items():
        for col, c in cells.items():
            if not (label == 'scratch' and col.startswith('MIM')):
                assert len(parse_cell(c)) == 2, (label, col, c)
    for cells in tables['Table 4: tokenizers'].values():
        assert all(len(parse_cell(c)) == 2 for col, c in cells.items()
                   if not col.startswith('perceptual')), cells  # 2 steps: may be nan there
    assert (wd / 'report_files' / 'reconstructions.png').stat().st_size > 500


def test_each_run_reads_what_its_producer_wrote(quick_study):
    """The tokenizers train against the converted loss network and are measured with the
    OTHER network; each pretraining reads its own seed's tokenizer, PeCo's in fp32 (the
    study's reference); each fine-tuning starts from its own seed's pretraining."""
    from mmengine.config import Config
    wd, _ = quick_study

    def cfg(run, name):
        return Config.fromfile(str(wd / run / name))
    tok = cfg('tokenizer_lambda1_seed1', 'tokenizer_world.py')
    assert tok.model.perceptual.checkpoint == str(wd / 'mocov3' / 'vit_tiny_pecovit.pth')
    assert tok.test_evaluator.perceptual.checkpoint == str(
        wd / 'mocov3_measure' / 'vit_tiny_pecovit.pth')
    assert tok.randomness.seed == 1
    last = {d: (wd / d / 'last_checkpoint').read_text().strip()
            for d in ('tokenizer_lambda1_seed1', 'tokenizer_lambda0_seed1',
                      'pretrain_peco_seed1', 'pretrain_pixel_seed1')}
    peco = cfg('pretrain_peco_seed1', 'pretrain_peco_world.py')
    assert peco.model.target_generator.checkpoint == last['tokenizer_lambda1_seed1']
    assert peco.model.target_generator.encode_bf16 is False
    pixel = cfg('pretrain_pixel_seed1', 'pretrain_pixel_world.py')
    assert pixel.model.target_generator.checkpoint == last['tokenizer_lambda0_seed1']
    seg = cfg('seg_pixel_seed1', 'upernet_vit_tiny_world.py')
    assert seg.model.backbone.init_cfg.checkpoint == last['pretrain_pixel_seed1']
    assert cfg('cls_scratch_seed1', 'finetune_vit_tiny_world.py').model.backbone.init_cfg is None
    assert 'work_dirs/study' not in tok.pretty_text


def test_reconstruction_grid_rows(quick_study):
    """Top row: one validation original per class, exactly; rows 2-3: reconstructions."""
    wd, _ = quick_study
    grid = np.asarray(Image.open(wd / 'report_files' / 'reconstructions.png'))[::3, ::3]
    first = sorted((wd / 'world' / 'cls' / 'val').iterdir())[0]
    original = np.asarray(Image.open(sorted(first.glob('*.png'))[0]).convert('RGB'))
    pad = (grid.shape[0] - 3 * 32) // 4
    np.testing.assert_array_equal(grid[pad:pad + 32, pad:pad + 32], original)
    recon = grid[2 * pad + 32:2 * pad + 64, pad:pad + 32].astype(int)
    assert np.abs(recon - original).mean() > 1


def test_a_second_call_keeps_every_finished_run(quick_study):
    wd, _ = quick_study
    before = (wd / 'report.md').read_text()
    log = run_tool(['tools/study.py', '--profile', 'quick', '--work-dir', wd],
                   timeout=300).stdout
    assert log.count('finished earlier, kept') == 23 and 'Iter(train)' not in log
    after = (wd / 'report.md').read_text()
    assert after.split('## Conclusions')[1] == before.split('## Conclusions')[1]


def test_bf16_targets_row_pretrains_on_the_same_tokenizer_in_bf16(tmp_path, monkeypatch):
    """--bf16-targets: per seed one more pretraining, on the lambda = 1 tokenizer of that seed
    with encode_bf16=True, fine-tuned like the others; its report row is compared with the
    fp32-target PeCo, with no direction claimed (the runs recorded, not trained)."""
    from peco_mm.tooling.study_report import check_report, parse_tables
    tool = load_tool('study')
    study = tool.Study(str(tmp_path), 'quick', seeds=2, bf16_targets=True)
    assert study.inits == ('peco', 'pixel', 'scratch', 'peco_bf16')
    assert 'pretrain_peco_bf16_seed1' in [r[0] for r in study.plan.runs]
    calls = {}

    def record(run_dir, name, stage, seed, options=None, evaluate=None, wait=True):
        calls[run_dir] = (name, seed, dict(options or {}))
        return dict(ckpt=f'{run_dir}/last.pth', metrics={})
    monkeypatch.setattr(study, 'run', record)
    toks = {(lam, s): dict(ckpt=f'tok{lam:g}_{s}.pth') for lam in (0.0, 1.0) for s in (0, 1)}
    pre = tool.stage_pretrain(study, toks)
    name, seed, opts = calls['pretrain_peco_bf16_seed1']
    assert (name, seed) == ('pretrain_peco_world.py', 1)
    assert opts == {'model.target_generator.checkpoint': 'tok1_1.pth',
                    'model.target_generator.encode_bf16': True}
    assert calls['pretrain_peco_seed1'][2] == {'model.target_generator.checkpoint': 'tok1_1.pth'}
    tool.stage_downstream(study, pre)
    assert calls['seg_peco_bf16_seed0'][2] == {
        'model.backbone.init_cfg.checkpoint': 'pretrain_peco_bf16_seed0/last.pth'}
    # the report: a row of its own, compared with fp32-target PeCo in every column
    tok = {'tokenizer/psnr': 20.0, 'tokenizer/ssim': 0.5, 'tokenizer/perceptual': 1.0,
           'tokenizer/codeword_probe_acc': 30.0, 'tokenizer/recon_cls_acc': 40.0,
           'tokenizer/usage': 0.9}
    res = dict(
        tokenizers={(lam, s): dict(metrics=tok) for lam in (0.0, 1.0) for s in (0, 1)},
        pretrain={(t, s): dict(metrics=dict(mim_acc=5.0 + s)) for t in study.targets
                  for s in (0, 1)},
        downstream={(task, init, s): dict(metrics={'accuracy/top1': 12.0 + s, 'mIoU': 9.0})
                    for task in ('cls', 'seg') for init in study.inits for s in (0, 1)})
    tables, conclusions = tool.report_tables(
        study, res, {'accuracy/top1': 10.0, 'mIoU': 7.2, 'mim_acc': 0.8})
    text = '\n\n'.join(tables) + '\n\n' + '\n'.join(conclusions) + '\n'
    assert check_report(text) == []
    assert 'PeCo, targets encoded in bf16' in parse_tables(text)[tool.T23]
    vs_fp32 = [c for c in conclusions if '|PeCo, targets encoded in bf16|PeCo (lambda' in c]
    assert len(vs_fp32) == 3 and all('paper: no direction' in c for c in vs_fp32)
