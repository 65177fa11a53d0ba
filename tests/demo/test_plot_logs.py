"""tools/plot_logs.py: curves from mmengine's scalars.json of any run (a resumed run's two
timestamp folders joined in order), one PNG per panel that has data, clear errors otherwise;
and every tool of tools/ answers --help before importing torch."""
import json
import runpy
import sys

import numpy as np
import pytest
from PIL import Image

from tests.conftest import ROOT, load_tool


def write_run(work_dir, stamp, records):
    d = work_dir / stamp / 'vis_data'
    d.mkdir(parents=True)
    (d / 'scalars.json').write_text(''.join(json.dumps(r) + '\n' for r in records))


@pytest.fixture
def runs(tmp_path):
    """A tokenizer run resumed once (two timestamp folders) and a MIM pretraining run."""
    tok = tmp_path / 'tokenizer'
    write_run(tok, '20260101_100000', [
        dict(lr=1e-3, loss=1.0, loss_pixel=0.8, codebook_usage=0.2, codebook_perplexity=10.0,
             iter=10, step=10),
        dict(lr=1e-3, loss=0.8, loss_pixel=0.6, codebook_usage=0.4, codebook_perplexity=20.0,
             iter=20, step=20)])
    write_run(tok, '20260101_120000', [
        dict(lr=1e-3, loss=0.5, loss_pixel=0.4, codebook_usage=0.5, codebook_perplexity=30.0,
             iter=30, step=30),
        dict(**{'tokenizer/psnr': 20.0}, step=30)])
    mim = tmp_path / 'pretrain'
    write_run(mim, '20260102_100000', [dict(lr=1e-3, loss=4.0 - i, mim_acc=0.1 * i, iter=i,
                                            step=i) for i in range(1, 4)])
    return tok, mim


def test_resumed_run_is_one_curve(runs):
    from peco_mm.tooling.logs import last_metrics, match_keys, read_scalars, series
    recs = read_scalars(runs[0])
    assert series(recs, 'loss') == ([10, 20, 30], [1.0, 0.8, 0.5])
    assert match_keys(recs, ['loss*']) == ['loss', 'loss_pixel']
    assert last_metrics(recs) == {'tokenizer/psnr': 20.0, 'step': 30}
    # a timestamp folder or the file itself reads just that part
    assert len(read_scalars(runs[0] / '20260101_100000')) == 2
    assert len(read_scalars(runs[0] / '20260101_120000' / 'vis_data' / 'scalars.json')) == 2


def test_panels_with_data_become_pngs(runs, tmp_path, capsys):
    out = tmp_path / 'plots'
    tool = load_tool('plot_logs')
    written = tool.main([str(runs[0]), str(runs[1]), '--out', str(out)])
    assert sorted(written) == ['accuracy', 'codebook_perplexity', 'codebook_usage', 'loss']
    for name in written:
        img = np.asarray(Image.open(out / f'{name}.png').convert('RGB'))
        assert img.shape[0] > 200 and (img < 128).any()  # drawn, not blank
    assert f"loss: {out / 'loss.png'}" in capsys.readouterr().out
    # only the MIM run: no codebook panels
    assert sorted(tool.main([str(runs[1]), '--out', str(tmp_path / 'm')])) == [
        'accuracy', 'loss']
    assert tool.run_label(str(runs[0] / '20260101_100000')) == 'tokenizer'
    # custom keys
    assert list(tool.main([str(runs[1]), '--out', str(tmp_path / 'c'), '--keys', 'lr'])) == [
        'custom']


def test_errors_name_the_problem(runs, tmp_path):
    tool = load_tool('plot_logs')
    with pytest.raises(SystemExit, match='no vis_data/scalars.json under'):
        tool.main([str(tmp_path / 'nothing'), '--out', str(tmp_path / 'o')])
    with pytest.raises(SystemExit, match="keys there: .*'mim_acc'"):
        tool.main([str(runs[1]), '--out', str(tmp_path / 'o'), '--keys', 'nope'])
    bad = tmp_path / 'bad'
    write_run(bad, '1', [dict(loss=1)])
    (bad / '1' / 'vis_data' / 'scalars.json').write_text('{"loss": 1}\nnot json\n')
    with pytest.raises(SystemExit, match=r'scalars.json:2: not a JSON record'):
        tool.main([str(bad), '--out', str(tmp_path / 'o')])


TOOLS = ['study.py', 'benchmark.py', 'plot_logs.py', 'tokenize_dataset.py',
         'adversarial_eval.py', 'make_demo_data.py', 'visualize_mim.py',
         'visualize_reconstructions.py']


@pytest.mark.parametrize('tool', TOOLS)
def test_help_comes_before_heavy_imports(tool, monkeypatch, capsys):
    """--help parses the arguments before torch is imported (here: torch hidden from the
    import system), and shows the whole description and the examples."""
    monkeypatch.setattr(sys, 'argv', [tool, '--help'])
    monkeypatch.setitem(sys.modules, 'torch', None)  # `import torch` would raise
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(ROOT / 'tools' / tool), run_name='__main__')
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert 'examples:' in out and out.count('\n') > 10
    assert (ROOT / 'tools' / tool).read_text().startswith('#!/usr/bin/env python3\n')
    assert (ROOT / 'tools' / tool).stat().st_mode & 0o111
