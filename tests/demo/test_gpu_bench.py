"""tools/gpu_bench.sh: its parts run in the documented order, each command parses, and the
parts' time limits add up to at most 8 minutes with the start's margin."""
import re
import shlex

from tests.conftest import ROOT, load_tool

SCRIPT = (ROOT / 'tools' / 'gpu_bench.sh').read_text()


def parts() -> list[tuple[str, list[str]]]:
    """(name, argv) of each `part NAME ARGS...` call, continuation lines joined."""
    text = SCRIPT.replace('\\\n', ' ')
    calls = re.findall(r'^part (\w+) (.+)$', text, flags=re.M)
    return [(name, shlex.split(args.replace('"$OUT/chain_work"', 'OUT/chain_work')))
            for name, args in calls]


def test_parts_run_in_order_and_their_limits_fit_eight_minutes():
    limits = dict(re.findall(r'\[(\w+)\]=(\d+)', re.search(r'PART_LIMITS=\((.+)\)',
                                                           SCRIPT).group(1)))
    names = [name for name, _ in parts()]
    assert names == ['steps', 'tokenizer_train', 'levers', 'chain']
    assert set(limits) == set(names)
    total = sum(int(v) for v in limits.values())
    assert total <= 8 * 60 - 20, total  # 20 s for the start, nvidia-smi and the clean-up
    assert '7 min 40 s' in SCRIPT and total == 460


def test_every_part_is_a_command_the_tools_accept():
    bench, sweep = load_tool('benchmark'), None
    from peco_mm.tooling import lever_sweep
    for name, argv in parts():
        if argv[:2] == ['-m', 'peco_mm.tooling.lever_sweep']:
            args = lever_sweep.parse_args(argv[2:] + ['--out', 'x.json'])
            sweep = args
            continue
        assert argv[0] == 'tools/benchmark.py', (name, argv)
        args = bench.parse_args(argv[1:] + ['--out', 'x.json'])
        if name == 'steps':  # PeCo and BEiT in one run, bf16 at the paper's batch
            assert args.models == ['peco', 'beit'] and args.batch == 256
            assert args.precision == ['bf16']
        if name == 'tokenizer_train':  # the configs' batch, both variants and precisions
            assert args.batch is None and args.precision is None
            assert args.variants == ['default', 'adversarial']
    assert sweep is not None and sweep.batch == 256 and sweep.device == 'cuda'


def test_lever_sweep_runs_each_lever_and_reports_one_that_fails(tmp_path, monkeypatch):
    """Every lever runs once against the eager-target reference; a lever the device cannot
    run is reported with its error and the others are measured; the JSON holds every row."""
    import json

    from peco_mm.tooling import benchmark, lever_sweep
    seen = []

    def fake(models, batch, steps, warmup, device, amp, smoke, **kw):
        seen.append(kw)
        if kw.get('sdpa') == 'efficient':
            raise RuntimeError('No viable backend for scaled_dot_product_attention')
        return [dict(model='peco', ms_per_step=100.0 / (1 + len(seen)))]
    monkeypatch.setattr(benchmark, 'bench_pretrain', fake)
    out = tmp_path / 'levers.json'
    rows = lever_sweep.sweep('cpu', 4, 1, 0, True, str(out))
    assert [r['lever'] for r in rows] == [name for name, _ in lever_sweep.LEVERS]
    assert all(kw['target_compile'] is False for kw in seen)
    assert [sorted(set(kw) - {'target_compile'}) for kw in seen] == [
        [], ['target_layout'], ['target_bf16'], ['target_chunk'], ['sdpa'], ['fused_adamw'],
        ['compile_step']]
    failed = [r for r in rows if 'error' in r]
    assert [r['lever'] for r in failed] == ['SDPA efficient kernel']
    assert json.loads(out.read_text())['rows'] == rows
