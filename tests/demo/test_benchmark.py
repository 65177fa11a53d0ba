"""tools/benchmark.py --smoke: every pretraining model and both dense configs are timed, and
the Markdown block states the command and the device."""
from tests.conftest import run_tool


def test_benchmark_smoke(tmp_path):
    import json
    out = tmp_path / 'bench.json'
    proc = run_tool(['tools/benchmark.py', '--smoke', '--only', 'pretrain', 'dense',
                     '--device', 'cpu', '--out', out], timeout=300)
    res = json.loads(out.read_text())
    assert [r['model'] for r in res['pretrain']] == ['peco', 'beit', 'mae', 'peco_mae']
    for r in res['pretrain']:
        assert r['ms_per_step'] > 0
        assert abs(r['img_per_s'] - 4 / r['ms_per_step'] * 1000) < 0.1 * r['img_per_s']
    assert [r['config'] for r in res['dense']] == ['upernet_tiny_shapes.py',
                                                   'mask_rcnn_tiny_shapes.py']
    assert all(r['s_per_step'] > 0 and r['params_m'] > 0 for r in res['dense'])
    assert '`python tools/benchmark.py --smoke --only pretrain dense' in proc.stdout
    assert '| peco |' in proc.stdout and '| upernet_tiny_shapes.py |' in proc.stdout
