"""tools/tokenizer_bf16.py: the paired fp32 / bf16 tokenizer comparison's runs are the study's
tokenizer config with only the precision changed, and its verdicts follow the margins."""
import pytest

from peco_mm.tooling import precision_study as ps


def test_both_runs_are_the_study_config_but_for_the_precision(tmp_path):
    cfgs = {p: ps.tokenizer_config(tmp_path / 'rep3', 3, 40, 8, p, str(tmp_path / 'net.pth'))
            for p in ps.PRECISIONS}
    for p, cfg in cfgs.items():
        assert cfg.model.train_bf16 is (p == 'bf16')
        assert cfg.randomness.seed == 3 and cfg.train_cfg.max_iters == 40
        assert cfg.train_dataloader.batch_size == 8
        assert cfg.model.perceptual.checkpoint == str(tmp_path / 'net.pth')
        assert cfg.test_evaluator.classifier is None
        assert cfg.train_dataloader.dataset.data_root == str(tmp_path / 'rep3' / 'world' /
                                                             'pretrain')
        assert cfg.work_dir == str(tmp_path / 'rep3' / f'tokenizer_{p}')
    a, b = (dict(c.to_dict()) for c in cfgs.values())
    differ = {k for k in a if a[k] != b[k]}
    assert differ == {'model', 'work_dir'}
    assert {k for k in a['model'] if a['model'][k] != b['model'][k]} == {'train_bf16'}


def result(key_values: dict) -> dict:
    return {p: dict(metrics={k: v[i] for k, v in key_values.items()})
            for i, p in enumerate(ps.PRECISIONS)}


def test_verdicts_follow_the_interval_and_the_margin():
    keys = list(ps.MARGINS)
    same = [result({k: (10.0, 10.0 + d) for k in keys}) for d in (0.01, -0.01, 0.0, 0.02, -0.02)]
    rows = ps.compare(same)
    assert all(r['verdict'] == 'same' for r in rows.values())
    assert rows['psnr']['ci95'][0] <= 0 <= rows['psnr']['ci95'][1]
    shifted = [result({k: (10.0, 11.0 + d) for k in keys}) for d in (0.1, -0.1, 0, 0.2, -0.2)]
    assert ps.compare(shifted)['psnr']['verdict'] == 'differs'
    wide = [result({k: (10.0, 10.0 + d) for k in keys}) for d in (3, -3, 0, 4, -4)]
    assert ps.compare(wide)['psnr']['verdict'] == 'undecided'  # holds 0, wider than 0.2 dB
    assert ps.compare(wide)['psnr']['mean_diff'] == pytest.approx(0.0)
    table = ps.md_comparison(dict(comparison=rows))
    assert table[2].startswith('| PSNR (dB) | 10.00 | 10.00 | +0.01, -0.01, +0.00, +0.02, -0.02')
    assert table[2].endswith('| ± 0.2 | same |')
