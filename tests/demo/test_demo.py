"""`make demo` is tools/study.py's demo profile; here its `quick` profile runs end to end (every
run 2 iterations, 2 seeds, with the bf16-target row): the console shows each run with an ETA,
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
    proc = run_tool(['tools/study.py', '--profile', 'quick', '--bf16-targets', '--work-dir', wd],
                    timeout=900, env=dict(OMP_NUM_THREADS='2'))
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
    n = 3 + 2 * 2 + 2 * 3 + 2 * 2 * 4  # nets, tokenizers, 3 pretraining targets, 4 inits
    assert [(int(k), int(m)) for k, m, _ in runs] == [(k, n) for k in range(1, n + 1)]
    assert runs[0][2] == 'ETA after the first run' and re.fullmatch(r'ETA \d+m\d\ds', runs[1][2])
    assert 'Iter(train)' not in log
    assert 'Iter(train)' in (wd / 'pretrain_peco_seed0' / 'console.log').read_text()
    text = (wd / 'report.md').read_text()
    pos = [text.index(s) for s in SECTIONS]
    assert pos == sorted(pos)
    assert check_report(text) == []
    tables = parse_tables(text)
    down = tables['Tables 2-3: pretraining and downstream']
    assert list(down) == ['PeCo (lambda = 1 codes)', 'pixel codebook (lambda = 0 codes)',
                          'scratch', 'PeCo, targets encoded in bf16',
                          'chance (a model that learned nothing)']
    for label, cells in down.items():
        for col, c in cells.items():
            if not (label == 'scratch' and col.startswith('MIM')):
                assert len(parse_cell(c)) == 2, (label, col, c)
    for cells in tables['Table 4: tokenizers'].values():
        assert all(len(parse_cell(c)) == 2 for col, c in cells.items()
                   if not col.startswith('perceptual')), cells  # 2 steps: may be nan there
    # the bf16-target row is compared with fp32-target PeCo, the paper making no claim
    assert re.search(r'\|PeCo, targets encoded in bf16\|PeCo \(lambda = 1 codes\)\|paper: no '
                     r'direction\] per seed', text)
    assert (wd / 'report_files' / 'reconstructions.png').stat().st_size > 500


def test_each_run_reads_what_its_producer_wrote(quick_study):
    """The tokenizers train against the converted loss network and are measured with the
    OTHER network; each pretraining reads its own seed's tokenizer (bf16 targets: the same
    tokenizer, encode_bf16 on); each fine-tuning starts from its own seed's pretraining."""
    from mmengine.config import Config
    wd, _ = quick_study

    def cfg(run, name):
        return Config.fromfile(str(wd / run / name))
    tok = cfg('tokenizer_lambda1_seed1', 'tokenizer_world.py')
    assert tok.model.perceptual_cfg.checkpoint == str(wd / 'mocov3' / 'vit_tiny_pecovit.pth')
    assert tok.test_evaluator.perceptual.checkpoint == str(
        wd / 'mocov3_measure' / 'vit_tiny_pecovit.pth')
    assert tok.randomness.seed == 1
    last = {d: (wd / d / 'last_checkpoint').read_text().strip()
            for d in ('tokenizer_lambda1_seed1', 'tokenizer_lambda0_seed1',
                      'pretrain_peco_seed1', 'pretrain_peco_bf16_seed1')}
    peco, bf16 = cfg('pretrain_peco_seed1', 'pretrain_peco_world.py'), \
        cfg('pretrain_peco_bf16_seed1', 'pretrain_peco_world.py')
    assert peco.model.target_generator.checkpoint == last['tokenizer_lambda1_seed1']
    assert bf16.model.target_generator.checkpoint == last['tokenizer_lambda1_seed1']
    assert not peco.model.target_generator.get('encode_bf16', False)
    assert bf16.model.target_generator.encode_bf16 is True
    pixel = cfg('pretrain_pixel_seed1', 'pretrain_pixel_world.py')
    assert pixel.model.target_generator.checkpoint == last['tokenizer_lambda0_seed1']
    seg = cfg('seg_peco_bf16_seed1', 'upernet_vit_tiny_world.py')
    assert seg.model.backbone.init_cfg.checkpoint == last['pretrain_peco_bf16_seed1']
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
    log = run_tool(['tools/study.py', '--profile', 'quick', '--bf16-targets', '--work-dir', wd],
                   timeout=300).stdout
    assert log.count('finished earlier, kept') == 29 and 'Iter(train)' not in log
    after = (wd / 'report.md').read_text()
    assert after.split('## Conclusions')[1] == before.split('## Conclusions')[1]
