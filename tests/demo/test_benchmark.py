"""tools/benchmark.py: the sub-commands time every model and config they name, and the memory
planner counts tensor bytes exactly, fits a line and says that its CPU figures are estimated."""
import json
import math

import pytest
import torch

from tests.conftest import ROOT, load_tool, run_tool


def test_all_smoke(tmp_path):
    out = tmp_path / 'bench.json'
    proc = run_tool(['tools/benchmark.py', 'all', '--smoke', '--device', 'cpu', '--out', out],
                    timeout=600)
    res = json.loads(out.read_text())
    assert [r['model'] for r in res['tokenizer']] == [
        'PeCo (default, 37.5M)', 'PeCo lite (25.7M)', 'PeCo default, no channels-last',
        'DALL-E encoder (BEiT, mmpretrain)']
    assert all(r['img_per_s'] > 0 and r['gflops'] > 0 for r in res['tokenizer'])
    assert [r['model'] for r in res['pretrain']] == ['peco', 'beit', 'mae', 'peco_mae']
    for r in res['pretrain']:
        assert r['ms_per_step'] > 0 and r['trainable_m'] > 0
        assert abs(r['img_per_s'] - 4 / r['ms_per_step'] * 1000) < 0.1 * r['img_per_s']
    assert [r['config'] for r in res['dense']] == ['upernet_tiny_shapes.py',
                                                   'mask_rcnn_tiny_shapes.py']
    assert all(r['s_per_step'] > 0 and r['params_m'] > 0 for r in res['dense'])
    assert '`python tools/benchmark.py all --smoke --device cpu' in proc.stdout
    assert '| peco |' in proc.stdout and '| upernet_tiny_shapes.py | 1 |' in proc.stdout
    # achieved FLOP/s = FLOPs x rate, shown against the machine's measured GEMM rate
    assert res['gemm_gflops'] > 0 and 'GEMM peak of this machine' in proc.stdout
    for r in res['tokenizer']:
        assert r['gflop_per_s'] == pytest.approx(r['gflops'] * r['img_per_s'],
                                                 rel=0.02, abs=0.1)
    for r in res['pretrain']:
        assert r['gflop_per_s'] == pytest.approx(
            r['gflops_per_step'] / r['ms_per_step'] * 1000, rel=0.02, abs=0.1)


def test_step_flops_scale_from_one_image_to_the_batch():
    # the pretrain table counts a one-image step and multiplies by the batch: exact for these
    # models, checked here against a count at batch 4 (forward, backward, frozen tokenizer)
    from torch.utils.flop_counter import FlopCounterMode

    from peco_mm.tooling import benchmark as bm
    s = bm.pretrain_sizes(smoke=True)
    for name in ('peco', 'peco_mae', 'mae'):
        model = bm.build_pretrain_model(name, s).train()
        counts = []
        for batch in (1, 4):
            torch.manual_seed(0)
            with FlopCounterMode(display=False) as counter:
                losses = model.loss(*bm.pretrain_inputs(name, s, batch, 'cpu'))
                sum(v for k, v in losses.items() if 'loss' in k).backward()
            counts.append(counter.get_total_flops())
        assert counts[0] > 0 and counts[1] == 4 * counts[0], (name, counts)


def test_repeats_run_fresh_processes_per_allocator_and_report_median_and_range(tmp_path):
    out = tmp_path / 'rep.json'
    proc = run_tool(['tools/benchmark.py', 'tokenizer', '--smoke', '--no-dalle', '--device',
                     'cpu', '--malloc', 'stock', 'reuse', '--repeats', '2', '--out', out],
                    timeout=600)
    runs = json.loads(out.read_text())['runs']
    assert [r['malloc'] for r in runs] == ['stock', 'reuse', 'stock', 'reuse']  # interleaved
    vals = sorted(r['tokenizer'][0]['img_per_s'] for r in runs if r['malloc'] == 'reuse')
    row = (f'| PeCo (default, 37.5M) | reuse | {sum(vals) / 2:.4g} | '
           f'{vals[0]:.4g} - {vals[1]:.4g} |')
    assert row in proc.stdout and 'median of 2 runs' in proc.stdout


def test_peak_memory_counts_live_storages():
    from peco_mm.tooling.memory import PeakMemory
    with PeakMemory() as mem:
        a = torch.empty(1000)  # 4000 bytes
        b = torch.empty(500, dtype=torch.float64)  # 4000
        v = a.view(10, 100)  # a view: no new storage
        a.add_(1)  # in place: none either
        assert mem.current == 8000
        del a, v
        assert mem.current == 4000  # the storage is freed with its last view
        c = torch.empty(250)  # 1000
        assert mem.current == 5000
        del b, c
    assert (mem.peak, mem.current) == (8000, 0)


def test_peak_memory_of_a_train_step_matches_the_arithmetic():
    """Linear 256 -> 512 without bias, batch 8, SGD with momentum: the peak is reached in the
    second step's optimizer update: weight + its gradient + momentum buffer + the input (the
    forward output is freed once backward has used it)."""
    from peco_mm.tooling.memory import PeakMemory, model_state_tensors
    torch.manual_seed(0)
    net = torch.nn.Linear(256, 512, bias=False)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(8, 256)
    w, act = 512 * 256 * 4, 8 * 512 * 4
    with PeakMemory() as mem:
        mem.track([*model_state_tensors(net), x])
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            net(x).square().sum().backward()
            opt.step()
    # weight, grad, momentum, input, plus at most a few activation-sized temporaries
    assert 3 * w + x.nbytes <= mem.peak <= 3 * w + x.nbytes + 4 * act


def test_memory_plan_extrapolates_and_says_so(capsys):
    """The tiny classifier config: the per-phase lines through batches 4 and 8 predict the
    peak measured at batch 16 within 1 %, and the CLI marks its CPU figures as estimated.
    (Below batch 4 this model's backward peak is set by its gradients, not by the
    activations: measure where the activations dominate.)"""
    from peco_mm.tooling import benchmark as bm
    config = str(ROOT / 'configs' / 'demo' / 'finetune_tiny_cls.py')
    cfg = bm.load_config(config)
    # the config trains with bf16 AMP, which 'auto' follows; the fit is checked in fp32
    assert bm.config_amp(cfg) == 'bf16'
    plan = bm.plan_memory(cfg, [16, 256], 'cpu', measure=(4, 8), amp='none')
    m = plan['model']
    assert plan['estimated'] and plan['amp'] == 'none'
    assert m.per_image['forward'] > 0 and m.per_image['backward'] > 0
    measured = bm.peak_step_memory(bm.load_config(config), 16, 'cpu', 'none')
    assert abs(plan['peak'][16] - max(measured.values())) < 0.01 * max(measured.values())
    assert plan['peak'][256] == pytest.approx(max(m.line(p, 256) for p in m.fixed))
    # the update holds weights, gradients and AdamW's two moments; the end of the forward
    # pass the weights and the moments, no gradients (set to None after each step)
    params = sum(p.numel() for p in bm.build_model(cfg, 'cpu', 2).parameters()) * 4
    assert measured['optimizer'] >= 4 * params
    assert 3 * params <= m.fixed['forward'] < 3.2 * params

    res = load_tool('benchmark').main(['memory', config, '--batch', '64', '--measure', '4', '8',
                                       '--device', 'cpu'])
    out = capsys.readouterr().out
    assert res['estimated'] and '**estimated**' in out and 'GiB (estimated) |' in out
    assert '| 64 |' in out and 'extrapolated' in out and 'WARNING' not in out
    assert res['phase'][64] in ('forward', 'backward')


def test_step_memory_takes_the_highest_phase_line():
    from peco_mm.tooling.memory import StepMemory
    m = StepMemory.fit({1: dict(forward=110., backward=150., optimizer=200.),
                        3: dict(forward=130., backward=170., optimizer=200.)})
    assert m.fixed == dict(forward=100., backward=140., optimizer=200.)
    assert m.per_image == dict(forward=10., backward=10., optimizer=0.)
    assert m(2) == 200. and m.phase_at(2) == 'optimizer'
    assert m(50) == 640. and m.phase_at(50) == 'backward' and m.max_residual() == 0.


def test_memory_rejects_a_single_measure_batch():
    with pytest.raises(SystemExit):
        load_tool('benchmark').parse_args(['memory', 'x.py', '--measure', '2', '2'])


def test_random_weights_give_a_frozen_target_a_random_tokenizer_file(tmp_path):
    """A pretraining config whose tokenizer checkpoint is not at hand still builds for speed
    and memory figures: a random tokenizer of the configured architecture takes its place."""
    from mmengine.config import ConfigDict
    from mmengine.registry import MODELS, DefaultScope

    from peco_mm.tooling.benchmark import random_weights
    from tests.mim.conftest import TINY_TOKENIZER as tiny
    model_cfg = ConfigDict(
        type='PeCo', backbone=dict(type='PeCoViT', arch='test', img_size=32, patch_size=8,
                                   use_mask_token=True),
        head=dict(type='PeCoMIMHead'),
        target_generator=dict(type='FrozenPeCoTokenizer', checkpoint=str(tmp_path / 'no.pth'),
                              **tiny))
    cfg = random_weights(model_cfg)
    assert cfg.target_generator.checkpoint != str(tmp_path / 'no.pth')
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg)
    assert model.target_generator.num_embeddings == 16 and model.head.num_classes == 16
    assert model.target_generator.encoder.conv_in.weight.shape[0] == 16


def test_random_weights_give_a_tokenizer_a_random_perceptual_network(tmp_path):
    """A tokenizer config whose perceptual checkpoint is not at hand is timed with a random
    perceptual network of the configured kind; a checkpoint that is there stays."""
    from mmengine.config import ConfigDict

    from peco_mm.tooling.benchmark import random_weights
    missing = ConfigDict(type='PeCoTokenizer', perceptual=dict(
        net='vit', checkpoint=str(tmp_path / 'no.pth'), layers=(3, 6)))
    percep = random_weights(missing).perceptual
    assert (percep.checkpoint, percep.allow_random, percep.net) == (None, True, 'vit')
    assert missing.perceptual.checkpoint == str(tmp_path / 'no.pth')  # not changed
    there = tmp_path / 'mocov3.pth'
    there.write_bytes(b'')
    kept = random_weights(ConfigDict(type='PeCoTokenizer',
                                     perceptual=dict(net='vit', checkpoint=str(there))))
    assert kept.perceptual.checkpoint == str(there) and 'allow_random' not in \
        kept.perceptual


def test_data_times_each_pipeline_and_counts_the_views_it_sends():
    # PeCo's pipeline: one 224 px view; BEiT's: the 224 px view and a 112 px one for DALL-E
    res = load_tool('benchmark').main(['data', '--smoke', '--warmup', '2'])
    rows = {r['config']: r for r in res['data']}
    peco, beit = rows['pretrain_vitb_in1k_300e.py'], rows['pretrain_beit_dalle_vitb_in1k_300e.py']
    assert (peco['views'], peco['input_kib']) == (1, 224 * 224 * 3 / 1024)
    assert (beit['views'], beit['input_kib']) == (2, (224**2 + 112**2) * 3 / 1024)
    assert peco['ms_per_sample'] > 0 and beit['ms_per_sample'] > 0
    # step by step from the JPEG on: each shipped step named, collate, and their total
    steps = [r for r in res['data_steps'] if r['config'] == 'pretrain_vitb_in1k_300e.py']
    assert [r['step'] for r in steps] == [
        'decode (LoadImageFromFile)', 'colour jitter', 'flip', 'RandomResizedCrop (bicubic)',
        'mask generation (block-wise)', 'pack', 'collate', 'total']
    assert all(r['ms_per_sample'] > 0 for r in steps) and steps[0]['jpeg_kib'] > 50
    assert steps[-1]['ms_per_sample'] == pytest.approx(
        sum(r['ms_per_sample'] for r in steps[:-1]), abs=0.01)
    assert res['default_workers'] == res['cores_per_gpu'] - 1 or res['default_workers'] == 1


def test_workers_per_gpu_follow_the_cores_and_the_cost_per_sample(tmp_path, monkeypatch):
    from PIL import Image

    from peco_mm.tooling import data_bench as db
    assert [db.default_workers(c) for c in (1, 2, 16, 32)] == [1, 1, 15, 31]
    # 256 samples of 22 ms in a 0.39 s step: 256 x 0.022 / 0.39 = 14.4 -> 15 workers
    assert db.workers_needed(22.0, 256, 0.39) == 15
    assert db.workers_needed(0.1, 8, 1.0) == 1
    # num_workers='auto' (the shipped pretraining loaders): the cores of a rank's share but one
    from mmengine.config import Config

    from peco_mm.supervisor import workers
    monkeypatch.setattr(workers.os, 'sched_getaffinity', lambda pid: set(range(32)),
                        raising=False)
    monkeypatch.setenv('LOCAL_WORLD_SIZE', '2')
    assert workers.cores_per_gpu() == 16
    cfg = Config.fromfile(str(ROOT / 'configs/peco/pretrain_vitb_in1k_800e.py'))
    assert cfg.train_dataloader.num_workers == 'auto'
    cfg.val_dataloader = dict(num_workers=3)
    workers.resolve_workers(cfg)
    assert (cfg.train_dataloader.num_workers, cfg.val_dataloader.num_workers) == (15, 3)
    files = db.write_jpegs(tmp_path, 2)
    assert [Image.open(f).size for f in files] == [(500, 375)] * 2
    assert all(f.read_bytes()[:2] == b'\xff\xd8' for f in files)  # JPEG


def test_repeats_pass_every_other_argument_to_the_child_runs():
    # a positional after --repeats N, and --flag=value forms, reach the child unchanged
    strip = load_tool('benchmark').without_flags
    arity = {'--malloc': 2, '--repeats': 1, '--out': 1}
    argv = ['data', '--repeats', '3', 'a.py', '--malloc', 'stock', 'reuse', 'b.py',
            '--out=x.json', '--steps', '5']
    assert strip(argv, arity) == ['data', 'a.py', 'b.py', '--steps', '5']


# ---- gpu-check ---------------------------------------------------------------------------------
def test_gpu_check_runs_its_cpu_part_and_lists_what_it_skipped(tmp_path):
    report, out = tmp_path / 'gpu_check.md', tmp_path / 'gpu_check.json'
    proc = run_tool(['tools/benchmark.py', 'gpu-check', '--device', 'cpu', '--smoke',
                     '--distributed-on-cpu', '--report', report, '--out', out], timeout=600)
    res, text = json.loads(out.read_text()), report.read_text()
    assert text in proc.stdout and text.startswith('# peco_mm GPU check')
    assert {s['section'] for s in res['skipped']} == {
        'mmcv ops on the GPU against the CPU', 'throughput and MFU', 'memory at the paper batch'}
    assert '## Skipped' in text and '- throughput and MFU: no CUDA' in text
    assert res['failed'] == [] and '## Failed' not in text and proc.returncode == 0
    a = res['code_agreement']
    assert a['codes'] == 8 * 8 * 8  # 8 images, 64 px, 8x down
    assert a['flipped'] == pytest.approx(a['codes'] * (1 - a['agreement']))
    assert f"| {a['codes']:.0f} | {a['flipped']:.0f} | {a['agreement']:.2%} |" in text
    # DDP and FSDP over gloo: gradients reduced, so both ranks hold the same weights
    assert [r['wrapper'] for r in res['distributed']] == ['DDP', 'FSDP']
    assert all(r['rank_weight_diff'] == 0 and r['loss'] > 0 for r in res['distributed'])


def test_gpu_check_reports_a_failing_section_and_runs_the_others(monkeypatch):
    from peco_mm.tooling import gpu_check as gc

    def broken(*args, **kwargs):
        raise RuntimeError('planted')
    monkeypatch.setattr(gc, 'check_code_agreement', broken)
    monkeypatch.setattr(gc, 'two_process_steps', lambda kind: [
        dict(wrapper='DDP', loss=1.0, rank_weight_diff=0.0)])
    res, lines = gc.run_gpu_check('.', 'cpu', smoke=True, distributed_on_cpu=True,
                                  log=lambda msg: None)
    assert res['failed'] == [dict(section='code agreement', error='RuntimeError: planted')]
    assert 'code_agreement' not in res and res['distributed'][0]['wrapper'] == 'DDP'
    text = '\n'.join(lines)
    assert text.index('## DDP and FSDP step') < text.index('## Failed')
    assert '- code agreement: `RuntimeError: planted`' in text


def test_gpu_check_inputs_are_fresh_leaves_on_every_device():
    # the CPU reference run must not mark the shared input: if it did, the GPU run's copy
    # would be a non-leaf and its .grad None (what the first run on a GPU hit)
    from peco_mm.tooling import gpu_check as gc
    t = torch.randn(2, 3)
    first, second = gc.fresh_leaf(t, 'cpu'), gc.fresh_leaf(t, 'cpu')
    assert not t.requires_grad
    for x in (first, second):
        assert x.is_leaf and x.requires_grad and x.data_ptr() != t.data_ptr()
        assert torch.equal(x, t)


def test_gpu_check_sections_run_on_any_device():
    # the CUDA sections take the device as an argument: on the CPU they run at toy sizes
    from peco_mm.tooling import benchmark as bm
    from peco_mm.tooling import gpu_check as gc
    assert all(r['passed'] for r in gc.check_mmcv_ops('cpu'))
    peak = bm.gemm_gflops('cpu', n=512) / 1000  # TFLOP/s
    rows = gc.mfu_rows('cpu', peak, batch=2, steps=1, warmup=0, smoke=True)
    assert [r['what'] for r in rows] == ['PeCo (default, 37.5M) encode, bf16',
                                         'PeCo pretraining step (smoke sizes), bf16']
    for r in rows:
        # TFLOP/s are rounded to 3 decimals
        assert r['img_per_s'] > 0 and r['mfu'] == pytest.approx(r['tflops'] / peak,
                                                                abs=0.0006 / peak)


@pytest.mark.parametrize('name,card', [
    ('NVIDIA H100 80GB HBM3', 'H100 SXM'), ('NVIDIA H100 PCIe', 'H100 PCIe'),
    ('NVIDIA H200', 'H200'), ('NVIDIA A100-SXM4-80GB', 'A100'), ('NVIDIA A10', 'A10'),
    ('NVIDIA L4', 'L4'), ('NVIDIA L40S', 'L40S'), ('NVIDIA GeForce RTX 4090', 'RTX 4090'),
    ('Tesla V100-SXM2-16GB', None)])
def test_card_peaks_match_device_names(name, card):
    from peco_mm.tooling.gpu_check import card_peak
    got = card_peak(name)
    assert (got[0] if got else None) == card


def test_precision_rows_are_tagged_and_compared_with_their_own_gemm_rate():
    from peco_mm.tooling import bench_report as bench
    gemm = dict(fp32=100.0, bf16=400.0)
    row = dict(model='peco', gflop_per_s=200.0)
    assert bench.with_precision(row, 'model', None, gemm) is row  # no --precision: as before
    bf16 = bench.with_precision(row, 'model', 'bf16', gemm)
    assert (bf16['model'], bf16['precision'], bf16['of_gemm']) == ('peco [bf16]', 'bf16', 400.0)
    rows = [dict(bf16, img_size=224, gflops=1.0, img_per_s=2.0)]
    assert rows[0]['model'] in bench.md_tokenizer(rows, peak=100.0)[2]
    assert '200 (50%)' in bench.md_tokenizer(rows, peak=100.0)[2]  # of 400, not of 100
    args = load_tool('benchmark').parse_args(['pretrain', '--precision', 'fp32', 'bf16'])
    assert args.precision == ['fp32', 'bf16']


def test_target_bf16_runs_the_frozen_encoder_in_bf16(monkeypatch):
    """`--target-bf16` puts PeCo's target encoder under bf16 autocast (its convolutions see
    bf16), tags the row, and leaves a model without a tokenizer untouched."""
    from peco_mm.tooling import benchmark as bm
    built, seen = {}, []
    build = bm.build_pretrain_model

    def recording_build(name, s):
        built[name] = model = build(name, s)
        target = getattr(model, 'target_generator', None)
        if target is not None:
            conv = next(m for m in target.encoder.modules() if isinstance(m, torch.nn.Conv2d))
            conv.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
        return model

    monkeypatch.setattr(bm, 'build_pretrain_model', recording_build)
    rows = bm.bench_pretrain(['peco', 'mae'], 2, 1, 0, 'cpu', 'bf16', smoke=True,
                             target_bf16=True)
    assert [r['model'] for r in rows] == ['peco (bf16 target)', 'mae']
    assert seen and set(seen) == {torch.bfloat16}
    seen.clear()
    bm.bench_pretrain(['peco'], 2, 1, 0, 'cpu', 'bf16', smoke=True)  # the default: fp32
    assert seen and set(seen) == {torch.float32}


def test_target_layout_and_compile_options_reach_the_frozen_encoder(monkeypatch):
    """`--target-layout contiguous` runs PeCo's target encoder on contiguous weights and
    inputs, `--target-compile on` hands the encoder to torch.compile; both tag the row, and
    neither touches a model without a PeCo target. The default is the frozen target's 'auto':
    channels-last and eager on the CPU."""
    from peco_mm.tooling import benchmark as bm
    layouts, compiled = [], []
    build = bm.build_pretrain_model

    def recording_build(name, s):
        model = build(name, s)
        target = getattr(model, 'target_generator', None)
        if target is not None:
            conv = next(m for m in target.encoder.modules() if isinstance(m, torch.nn.Conv2d))
            conv.register_forward_pre_hook(lambda m, i: layouts.append(
                (i[0].is_contiguous(), m.weight.is_contiguous())))
        return model

    def fake_compile(module):
        compiled.append(module)
        return module

    monkeypatch.setattr(bm, 'build_pretrain_model', recording_build)
    monkeypatch.setattr(torch, 'compile', fake_compile)
    rows = bm.bench_pretrain(['peco', 'mae'], 2, 1, 0, 'cpu', 'none', smoke=True,
                             target_layout=False, target_compile=True)
    assert [r['model'] for r in rows] == ['peco (contiguous target) (compiled target)', 'mae']
    assert layouts and set(layouts) == {(True, True)}
    assert len(compiled) == 1 and isinstance(compiled[0], torch.nn.Module)
    layouts.clear()
    rows = bm.bench_pretrain(['peco'], 2, 1, 0, 'cpu', 'none', smoke=True)  # the default
    assert rows[0]['model'] == 'peco' and len(compiled) == 1
    assert layouts and set(layouts) == {(False, False)}  # channels-last: not contiguous
    bench = load_tool('benchmark')
    assert bench.SDPA_BACKENDS == bm.SDPA_BACKENDS  # the tool's copy (its --help is torch-free)
    for argv in (['--target-contiguous', '--compile-target'],
                 ['--target-layout', 'contiguous', '--target-compile', 'on']):
        args = bench.parse_args(['pretrain', *argv])
        assert (bench.SETTING[args.target_layout], bench.SETTING[args.target_compile]) == (
            False, True)


def test_step_levers_leave_the_training_unchanged_and_tag_the_row(monkeypatch):
    """The levers of the pretraining step, run on the CPU at smoke size from the same seed,
    end with the weights the default step ends with (attention kernel, fused AdamW, the
    target encoded in chunks and contiguous), and name themselves in the row."""
    import random

    import numpy as np

    from peco_mm.tooling import benchmark as bm
    built, initial = [], []
    build = bm.build_pretrain_model

    def recording_build(name, s):
        built.append(build(name, s))
        initial.append([p.detach().clone() for p in built[-1].parameters()])
        return built[-1]

    monkeypatch.setattr(bm, 'build_pretrain_model', recording_build)
    monkeypatch.setattr(bm, 'count_gflops', lambda fn: 1.0)  # counted elsewhere; saves time

    def weights_after(**levers):
        random.seed(0)
        np.random.seed(0)
        row = bm.bench_pretrain(['peco'], 4, 1, 0, 'cpu', 'none', smoke=True, **levers)[0]
        return row['model'], [p.detach().clone() for p in built[-1].parameters()]

    name, base = weights_after()
    assert name == 'peco'
    # all at once (each alone is a GPU session's row): the default run's weights, to 1e-6
    name, weights = weights_after(sdpa='math', fused_adamw=True, target_chunk=1,
                                  target_layout=False)
    assert name == 'peco (contiguous target) (chunk 1 target) (sdpa math) (fused AdamW)'
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(base, weights))
    assert not all(torch.equal(a, b) for a, b in zip(base, initial[0]))  # the step trained
    with pytest.raises(ValueError, match="sdpa='fast'; expected one of"):
        bm.bench_pretrain(['peco'], 2, 1, 0, 'cpu', sdpa='fast')


def test_a_video_configs_synthetic_batch_is_a_clip_through_its_own_pipeline():
    """The dense benchmark times a TimeSformer config on random clips: the reader steps
    (DecordInit / DecordDecode) are replaced, the rest of mmaction2's pipeline runs (8 frames
    sampled, cropped to 224, NCTHW), and the label is one of the head's classes."""
    from peco_mm.tooling import benchmark as bm
    cfg = bm.load_config(str(ROOT / 'configs/peco/timesformer_vitb_k400.py'))
    assert [bm.is_loading_step(t) for t in cfg.train_dataloader.dataset.pipeline][:3] == [
        True, False, True]
    data = bm.synthetic_batch(cfg, 2)
    assert [tuple(x.shape) for x in data['inputs']] == [(1, 3, 8, 224, 224)] * 2
    labels = [int(s.gt_label) for s in data['data_samples']]
    assert all(0 <= y < 400 for y in labels)
    assert bm.num_classes_of(cfg.model) == 400
    # SSv2 samples its 8 frames with UniformSample (no SampleFrames step)
    cfg = bm.load_config(str(ROOT / 'configs/peco/timesformer_vitb_ssv2.py'))
    data = bm.synthetic_batch(cfg, 1)
    assert [tuple(x.shape) for x in data['inputs']] == [(1, 3, 8, 224, 224)]


# ---- chain -------------------------------------------------------------------------------------
@pytest.mark.slow
def test_chain_smoke_runs_every_stage_through_train_and_projects_the_schedule(tmp_path):
    """`chain --smoke`: the four stages of the documented chain (the demo's toy configs, at
    batch 2) each train 2 iterations through tools/train.py on data written in its host's
    layout, each reading the previous stage's checkpoint; the rows give s/iteration, the
    data share and the paper schedule's iterations x s/iteration."""
    out = tmp_path / 'chain.json'
    res = load_tool('benchmark').main(['chain', '--smoke', '--device', 'cpu', '--work-dir',
                                       str(tmp_path / 'wd'), '--gpus', '16', '--out', str(out)])
    rows = res['chain']
    assert [r['stage'] for r in rows] == ['tokenizer', 'pretrain', 'upernet', 'mask_rcnn']
    # the paper's schedules on 16 GPUs at the shipped per-GPU batches
    assert [r['schedule_iters'] for r in rows] == [100 * math.ceil(1281167 / (16 * 16)),
                                                   800 * math.ceil(1281167 / (256 * 16)),
                                                   80000, 12 * math.ceil(117266 / (2 * 16))]
    for r in rows:
        assert r['iterations'] == 2 and r['s_per_iter'] > 0 and 0 <= r['data_share'] < 1
        assert r['projected_h'] == pytest.approx(
            r['schedule_iters'] * r['s_per_iter'] / 3600, abs=0.06)
        assert r['peak_gib'] is None  # no CUDA: mmengine logs no memory
    wd = tmp_path / 'wd'
    # each stage's config as the run stored it reads the previous stage's checkpoint
    assert f"'{wd}/tokenizer/iter_2.pth'" in (wd / 'pretrain' / 'pretrain_tiny_photos.py'
                                              ).read_text()
    assert f"'{wd}/pretrain/iter_2.pth'" in (wd / 'upernet' / 'upernet_tiny_shapes.py'
                                             ).read_text()
    assert (wd / 'mask_rcnn' / 'epoch_1.pth').is_file()  # its epoch: exactly 2 iterations
    assert json.loads(out.read_text())['chain'] == rows


def test_chain_writes_the_hosts_layouts_and_shortens_each_schedule(tmp_path):
    """ImageNet's train/<class>/*.JPEG with meta/train.txt; an epoch-based config runs one
    epoch (of iters x batch images), an iteration-based one `iters` iterations; a tokenizer
    without its perceptual file gets a random one; the previous checkpoint goes to the key
    the stage reads."""
    from peco_mm.tooling import benchmark as bm
    from peco_mm.tooling import chain
    root = chain.write_imagenet(tmp_path / 'in', 6, (32, 40), classes=4)
    lines = (root / 'meta' / 'train.txt').read_text().split('\n')[:-1]
    assert len(lines) == 6 and lines[0] == 'n00000000/00000.JPEG 0'
    assert all((root / 'train' / line.split()[0]).is_file() for line in lines)
    pretrain, upernet = chain.STAGES[1], chain.STAGES[2]
    cfg = bm.load_config(str(ROOT / pretrain.config))
    opts, ckpt = chain.stage_options(cfg, 5, '/d', 'tok.pth', pretrain)
    assert ckpt == 'epoch_1.pth' and 'train_cfg.max_epochs=1' in opts
    assert 'model.target_generator.checkpoint=tok.pth' in opts
    assert 'train_dataloader.dataset.data_root=/d' in opts
    cfg = bm.load_config(str(ROOT / upernet.config))
    opts, ckpt = chain.stage_options(cfg, 5, '/d', 'pre.pth', upernet)
    assert ckpt == 'iter_5.pth' and 'train_cfg.max_iters=5' in opts
    assert 'model.backbone.init_cfg.checkpoint=pre.pth' in opts
    assert chain.schedule_iters(cfg, upernet, 4) == 160000 * 8 // 4
    from mmengine.config import Config  # the tokenizer's perceptual file (not at hand)
    cfg = Config(dict(train_cfg=dict(max_iters=9), model=dict(perceptual=dict(checkpoint='m'))))
    opts, _ = chain.stage_options(cfg, 5, '/d', None, chain.STAGES[0])
    assert 'model.perceptual.allow_random=True' in opts


def test_target_check_compares_the_device_default_with_eager_channels_last(tmp_path, capsys):
    """The GPU script's code check, run on the CPU: the default there is channels-last and
    eager, so both encodes are the same computation and every code agrees; --out holds what
    it returns."""
    from peco_mm.tooling.target_check import main
    out = tmp_path / 'codes.json'
    res = main(['--device', 'cpu', '--batch', '2', '--size', '32', '--steps', '1', '--smoke',
                '--out', str(out)])
    assert (res['default_layout'], res['default_compiled']) == ('channels_last', False)
    assert res['agreement'] == 1.0 and not res['compile_fell_back']
    assert res['ms_default'] > 0 and res['ms_eager_channels_last'] > 0
    assert json.loads(out.read_text()) == res and '| default |' in capsys.readouterr().out


def test_save_json_writes_a_tools_results_only_when_asked(tmp_path, monkeypatch):
    from peco_mm.tooling.tool_runs import save_json
    monkeypatch.chdir(tmp_path)
    save_json(None, {'a': 1})
    save_json('', {'a': 1})
    assert not list(tmp_path.iterdir())  # no --out: no file
    import numpy as np
    save_json('r.json', {'torch': torch.__version__, 'path': tmp_path, 'n': [1.5],
                         'miou': np.float32(34.5)}, indent=2)
    text = (tmp_path / 'r.json').read_text()
    assert json.loads(text) == {'torch': str(torch.__version__), 'path': str(tmp_path),
                                'n': [1.5], 'miou': 34.5}  # numpy numbers stay numbers
    assert text.startswith('{\n  "torch"')  # the indent asked for
