"""tools/benchmark.py tokenizer-train: the tokenizer's full training step of the shipped
configs (plain and adversarial), timed in fp32 and bf16, with FLOPs, MFU and peak memory."""
import json

import pytest

from peco_mm.utils.precision import cpu_has_native_bf16
from tests.conftest import load_tool


def test_tokenizer_train_smoke_rows_are_complete_and_consistent(tmp_path, capsys):
    # bf16 where this CPU computes it natively (emulated, a smoke step takes minutes)
    precisions = ['fp32', 'bf16'] if cpu_has_native_bf16() else ['fp32']
    out = tmp_path / 'tt.json'
    load_tool('benchmark').main(['tokenizer-train', '--smoke', '--device', 'cpu', '--threads',
                                 '2', '--precision', *precisions, '--out', str(out)])
    res = json.loads(out.read_text())
    rows = res['tokenizer_train']
    assert [(r['variant'], r['precision']) for r in rows] == [
        (v, p) for v in ('default', 'adversarial') for p in precisions]
    for r in rows:
        assert r['model'] == f"{r['variant']} [{r['precision']}]"
        assert (r['img_size'], r['batch']) == (32, 2)
        assert r['img_per_s'] == pytest.approx(2 / r['ms_per_step'] * 1000, rel=0.01)
        assert r['gflop_per_s'] == pytest.approx(r['gflops_per_step'] / r['ms_per_step'] * 1000,
                                                 rel=0.02, abs=0.1)
        assert r['mfu_of'] == f"{r['precision']} GEMM" and 0 < r['mfu'] < 1
        achieved = r['gflops_per_step'] / r['ms_per_step'] * 1000  # GFLOP/s
        assert r['mfu'] == pytest.approx(achieved / r['of_gemm'], rel=0.02, abs=1e-4)
        assert 0.05 < r['peak_rss_gib'] < 64
    flops = {(r['variant'], r['precision']): r['gflops_per_step'] for r in rows}
    # the FLOPs are the model's, whatever the precision; the discriminator adds its own
    assert len({flops['default', p] for p in precisions}) == 1
    assert flops['adversarial', 'fp32'] > flops['default', 'fp32'] > 0.1
    text = capsys.readouterr().out
    assert '| tokenizer training step | precision |' in text
    assert '| default [fp32] | fp32 | 2 |' in text and '| 1.00x |' in text


def test_tokenizer_train_uses_the_shipped_configs_batch_and_optimizer():
    """At full size the step is the config's: its per-GPU batch (16), 224 px, Adam (0.5, 0.95)
    at its lr, and the adversarial variant's discriminator counted from the first step."""
    from peco_mm.tooling import tokenizer_train_bench as tb
    model, optimizer, batch, size = tb.tokenizer_train_model(
        str(tb.ROOT / tb.CONFIGS['adversarial']), smoke=False)
    assert (batch, size) == (16, 224)
    assert optimizer == dict(type='Adam', lr=5e-5, betas=(0.5, 0.95), weight_decay=0.0)
    assert model.adversarial_start_iter == 0 and model.discriminator is not None
    assert model.num_params()['tokenizer'] == pytest.approx(37.5e6, rel=0.01)
    opt = tb.make_optimizer(model, optimizer)
    assert type(opt).__name__ == 'Adam' and opt.defaults['betas'] == (0.5, 0.95)
    with pytest.raises(ValueError, match="tokenizer-train: unknown \\['tiny'\\]"):
        tb.bench_tokenizer_train(['tiny'], ['fp32'], 2, 1, 0, 'cpu', smoke=True)
