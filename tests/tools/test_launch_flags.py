"""The launchers explain themselves and each flag does what its help says: `launch.run` and
tools/train.py, tools/test.py on a tiny classifier and an image folder the test writes."""
import os
import pickle
import resource
import shutil
import subprocess
import sys
import time

import pytest
import torch

from tests.conftest import ROOT, run_tool
from tests.tools.conftest import TINY_CLS, load_tool, run_log, scalars, write

PY_TOOLS = ['train', 'test']
SH_TOOLS = ['dist_train.sh', 'dist_test.sh', 'slurm_train.sh', 'slurm_test.sh']
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason='the CPU fallback')


@pytest.fixture
def cls_cfg(tmp_path, image_folder):
    return write(tmp_path / 'tiny_cls.py', TINY_CLS, data=image_folder, iters=2)


def train(cfg, work_dir, **flags):
    from peco_mm.supervisor.launch import run
    return run(str(cfg), str(work_dir), None, 'train', **flags).runner


# ---- explaining themselves ---------------------------------------------------------------
def imports_and_cpu(args: list[str]) -> tuple[set[str], float, subprocess.CompletedProcess]:
    """The modules a Python process imports, its CPU seconds, and its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, '-X', 'importtime', *args], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {line.split('|')[-1].strip() for line in out.stderr.splitlines()}, cpu, out


@pytest.fixture(scope='module')
def host_config_imports():
    """What mmengine's config module imports by itself (0.10.7: no torch; 0.10.6: torch),
    and its CPU seconds: the floor under a tool's --help."""
    imported, cpu, _ = imports_and_cpu(['-c', 'import mmengine.config'])
    return imported, cpu


@pytest.mark.parametrize('tool', sorted(p.stem for p in (ROOT / 'tools').glob('*.py')))
def test_help_is_fast_complete_and_imports_no_torch(tool, host_config_imports):
    host, host_cpu = host_config_imports
    imported, cpu, out = imports_and_cpu([f'tools/{tool}.py', '--help'])
    assert not ({'torch', 'peco_mm', 'mmpretrain', 'mmdet', 'mmseg'} & imported) - host
    # CPU seconds (a loaded machine does not make it flaky), beyond mmengine's own when it
    # imports torch
    assert cpu < 1.5 + (host_cpu if 'torch' in host else 0), cpu
    text = out.stdout
    doc = load_tool(tool).__doc__.strip()
    assert doc.splitlines()[-1].strip() in text  # the whole description, not its first line
    assert 'examples:' in text and f'tools/{tool}.py' in text.split('examples:')[1]


def test_train_and_test_help_list_the_host_flags():
    train_help = run_tool(['tools/train.py', '--help']).stdout
    for flag in ('--auto-scale-lr', '--no-validate', '--resume', '--amp', '--vis-backend',
                 '--cfg-options', '--launcher', '--work-dir'):
        assert flag in train_help, flag
    test_help = run_tool(['tools/test.py', '--help']).stdout
    for flag in ('--out', '--show-dir', '--vis-backend', '--cfg-options', '--work-dir'):
        assert flag in test_help, flag


def test_train_and_test_take_the_run_flags_from_one_place(monkeypatch):
    """The flags of a run and its start are one module's (peco_mm/supervisor/cli.py, loaded by
    its path: no torch), read the same by both tools."""
    monkeypatch.setenv('LOCAL_RANK', '0')  # (parsing sets it where unset)
    train_tool, test_tool = load_tool('train'), load_tool('test')
    assert train_tool.cli is test_tool.cli and train_tool.cli.__file__ == str(
        ROOT / 'peco_mm' / 'supervisor' / 'cli.py')
    flags = ['--vis-backend', 'tensorboard', '--cfg-options', 'a=1', '--show-config',
             '--skip-preflight', '--launcher', 'pytorch']
    shared = dict(vis_backend=['tensorboard'], cfg_options={'a': 1}, show_config=True,
                  skip_preflight=True, launcher='pytorch', local_rank=0)
    for args in (train_tool.parse_args(['c.py', *flags]),
                 test_tool.parse_args(['c.py', 'x.pth', *flags])):
        assert {k: getattr(args, k) for k in shared} == shared
    with pytest.raises(SystemExit, match="test.py: config file 'c.py' not found"):
        test_tool.cli.check_config(args, 'test.py')


@pytest.mark.parametrize('tool', SH_TOOLS)
def test_shell_tools_print_their_usage(tool):
    out = run_tool(['bash', f'tools/{tool}'], check=False)
    assert out.returncode == 2
    assert out.stdout.lstrip().startswith(('Train', 'Evaluate'))
    assert f'tools/{tool}' in out.stdout and 'PORT' in out.stdout
    for flag in ('--help', '-h'):  # asked for: the same text, and success
        asked = run_tool(['bash', f'tools/{tool}', flag], check=False)
        assert asked.returncode == 0 and asked.stdout == out.stdout, asked.stderr
    # the header comment only, not the script's first command
    assert 'set -euo' not in out.stdout and out.stdout.rstrip().endswith(('.', ')'))


@pytest.mark.parametrize('env, expected', [
    (dict(NNODES='2', NODE_RANK='1', MASTER_ADDR='10.0.0.1'),
     '--nnodes=2 --node_rank=1 --master_addr=10.0.0.1 --master_port=29500'),  # nodes agree
    (dict(NNODES='2', NODE_RANK='0', PORT='1234'),
     '--nnodes=2 --node_rank=0 --master_addr=127.0.0.1 --master_port=1234'),
    (dict(), '--standalone --nnodes=1'),  # one node: a free port, so local jobs never clash
    (dict(PORT='1234'), '--nnodes=1 --node_rank=0 --master_addr=127.0.0.1 --master_port=1234'),
])
def test_dist_scripts_node_arguments(env, expected):
    clean = {k: v for k, v in os.environ.items()
             if k not in ('NNODES', 'NODE_RANK', 'MASTER_ADDR', 'PORT')}
    show = 'source tools/torchrun_args.sh; echo "${TORCHRUN_ARGS[@]}"'
    out = subprocess.run(['bash', '-c', show], cwd=ROOT, env={**clean, **env},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == expected
    for script in ('dist_train.sh', 'dist_test.sh'):
        assert 'source "$ROOT/tools/torchrun_args.sh"' in (ROOT / 'tools' / script).read_text()


@pytest.mark.parametrize('tool, args, expected', [
    ('dist_train.sh', ['c.py', '2', '--amp'],
     ['python tools/train.py c.py --preflight-only --amp',
      'python peco_mm/supervisor/process_tree.py python -P -m torch.distributed.run --standalone '
      '--nnodes=1 --nproc_per_node=2 tools/train.py c.py --launcher pytorch --amp']),
    ('dist_train.sh', ['c.py', '2', '--skip-preflight'],  # no preflight process
     ['python peco_mm/supervisor/process_tree.py python -P -m torch.distributed.run --standalone '
      '--nnodes=1 --nproc_per_node=2 tools/train.py c.py --launcher pytorch --skip-preflight']),
    ('dist_test.sh', ['c.py', 'w.pth', '3', '--out', 'o.pkl'],
     ['python peco_mm/supervisor/process_tree.py python -P -m torch.distributed.run --standalone '
      '--nnodes=1 --nproc_per_node=3 tools/test.py c.py w.pth --launcher pytorch --out o.pkl']),
    ('slurm_train.sh', ['part', 'job', 'c.py', '--amp'],
     ['srun -p part --job-name=job --gres=gpu:2 --ntasks=2 --ntasks-per-node=2 '
      '--cpus-per-task=5 --kill-on-bad-exit=1 python -u tools/train.py c.py --launcher slurm '
      '--amp MASTER_PORT=29500']),
    ('slurm_test.sh', ['part', 'job', 'c.py', 'w.pth'],
     ['srun -p part --job-name=job --gres=gpu:2 --ntasks=2 --ntasks-per-node=2 '
      '--cpus-per-task=5 --kill-on-bad-exit=1 python -u tools/test.py c.py w.pth '
      '--launcher slurm MASTER_PORT=29500']),
])
def test_shell_tools_start_the_command_their_usage_says(tool, args, expected, tmp_path):
    """The commands each launcher starts, shown by a PYTHON and an srun that print their
    arguments (and the port srun's processes are told) instead of running anything."""
    fake = tmp_path / 'python'
    fake.write_text('#!/usr/bin/env bash\n'
                    'echo "$(basename "$0") $*${MASTER_PORT:+ MASTER_PORT=$MASTER_PORT}"\n')
    fake.chmod(0o755)
    (tmp_path / 'srun').symlink_to(fake)
    env = {k: v for k, v in os.environ.items() if k not in (
        'NNODES', 'NODE_RANK', 'MASTER_ADDR', 'PORT', 'MASTER_PORT', 'PECO_SKIP_PREFLIGHT')}
    env.update(PYTHON=str(fake), GPUS='2', PATH=f'{tmp_path}:{env["PATH"]}')
    out = subprocess.run(['bash', f'tools/{tool}', *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    shown = out.stdout.replace(str(fake), 'python').replace(f'{ROOT}/', '')
    assert shown.splitlines() == expected


@pytest.mark.parametrize('tool', [f'{t}.py' for t in PY_TOOLS] + SH_TOOLS)
def test_tools_run_as_bare_commands_from_any_folder(tool, tmp_path):
    path = ROOT / 'tools' / tool
    first = path.read_text().splitlines()[0]
    assert first == ('#!/usr/bin/env python3' if tool.endswith('.py') else '#!/usr/bin/env bash')
    assert os.access(path, os.X_OK)
    if shutil.which('git') and (ROOT / '.git').exists():
        mode = subprocess.run(['git', 'ls-files', '-s', f'tools/{tool}'], cwd=ROOT,
                              capture_output=True, text=True).stdout.split()
        assert not mode or mode[0] == '100755', mode  # (untracked until committed)
    if tool.endswith('.py'):  # an activated venv: python3 is the venv's
        env = dict(os.environ, PATH=f'{os.path.dirname(sys.executable)}:{os.environ["PATH"]}')
        out = subprocess.run([str(path), '--help'], cwd=tmp_path, env=env, capture_output=True,
                             text=True)
        assert out.returncode == 0 and 'examples:' in out.stdout, out.stderr


@pytest.mark.parametrize('tool', sorted(p.name for p in (ROOT / 'tools').glob('*.py')
                                        if p.name != 'check_environment.py'))
def test_tools_outside_the_environment_name_the_fix(tool, tmp_path):
    """A Python without the project's packages (`-S`: no site-packages, as a system python):
    one line naming the missing packages and the activation, no ModuleNotFoundError."""
    out = subprocess.run([sys.executable, '-S', str(ROOT / 'tools' / tool), 'A', 'B'],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert 'Traceback' not in out.stderr and 'ModuleNotFoundError' not in out.stderr
    assert out.stderr.startswith(f'tools/{tool}: torch, mmengine not found by ')
    # the project's venv when it has one; else how to build it (e.g. `make test-torch-low`
    # in a fresh clone, whose suite runs in its own venv)
    fix = f"source {ROOT / '.venv' / 'bin' / 'activate'} first" \
        if (ROOT / '.venv' / 'bin' / 'python').exists() else f'make install (in {ROOT}) builds it'
    assert fix in out.stderr


def test_check_environment_passes_here_and_names_the_fix_outside():
    assert run_tool(['tools/check_environment.py']).returncode == 0
    out = subprocess.run([sys.executable, '-S', str(ROOT / 'tools' / 'check_environment.py')],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and 'torch, mmengine' in out.stderr, out.stderr


# ---- train flags -----------------------------------------------------------------------------
def test_no_validate_runs_no_val_loop(cls_cfg, tmp_path, isolated_mmengine):
    with_val = train(cls_cfg, tmp_path / 'val')
    assert any('accuracy/top1' in r for r in scalars(tmp_path / 'val'))
    assert with_val.val_loop is not None
    without = train(cls_cfg, tmp_path / 'noval', no_validate=True)
    recs = scalars(tmp_path / 'noval')
    assert [r['iter'] for r in recs if 'loss' in r] == [1, 2]  # it trained
    assert not any('accuracy/top1' in r for r in recs)
    assert without._val_loop is None and without.cfg.val_dataloader is None
    assert 'Epoch(val)' not in run_log(tmp_path / 'noval')


def test_auto_scale_lr_scales_by_total_batch(cls_cfg, tmp_path, isolated_mmengine):
    # one process x 6 images against a base batch of 24: lr x 0.25 in every param group
    opts = {'auto_scale_lr.base_batch_size': 24}
    from peco_mm.supervisor.launch import run
    plain = run(str(cls_cfg), str(tmp_path / 'a'), opts, 'train').runner
    scaled = run(str(cls_cfg), str(tmp_path / 'b'), opts, 'train', auto_scale_lr=True).runner
    lr0 = [g['lr'] for g in plain.optim_wrapper.optimizer.param_groups]
    lr1 = [g['lr'] for g in scaled.optim_wrapper.optimizer.param_groups]
    assert len(lr0) > 1 and lr0[0] > 0
    torch.testing.assert_close(torch.tensor(lr1), 0.25 * torch.tensor(lr0))
    assert 'Scaling the original LR by 0.25' in run_log(tmp_path / 'b')
    logged = [scalars(tmp_path / d)[0]['lr'] for d in 'ab']
    assert logged[1] == pytest.approx(0.25 * logged[0])


@pytest.mark.parametrize('vis_name', [None, 'visualizer'])  # mmseg and mmdet name theirs
def test_two_runs_in_the_same_second_log_to_their_own_work_dirs(
        cls_cfg, tmp_path, isolated_mmengine, monkeypatch, vis_name):
    # mmengine names a run's visualizer <config>_<timestamp> (or the config's own name) and
    # hands back an existing instance of that name: with the clock frozen, without distinct
    # names the second run's scalars would go to the first run's folder
    from peco_mm.supervisor.launch import run
    monkeypatch.setattr(time, 'time', lambda: 1.8e9)
    opts = {'visualizer.name': vis_name} if vis_name else None
    runners = [run(str(cls_cfg), str(tmp_path / d), opts, 'train').runner for d in 'ab']
    assert runners[0].experiment_name != runners[1].experiment_name
    assert runners[0].visualizer is not runners[1].visualizer
    for d in 'ab':
        assert [r['iter'] for r in scalars(tmp_path / d) if 'loss' in r] == [1, 2]


def test_cpu_malloc_typo_names_the_key_before_training(cls_cfg, tmp_path):
    from peco_mm.supervisor.launch import run
    with pytest.raises(ValueError, match=r"env_cfg.cpu_malloc='reuze': expected one of"):
        run(str(cls_cfg), str(tmp_path), {'env_cfg.cpu_malloc': 'reuze'}, 'train')
    assert not (tmp_path / 'epoch_1.pth').exists() and not list(tmp_path.glob('*/vis_data'))


def test_auto_scale_lr_without_base_batch_names_the_key(cls_cfg, tmp_path):
    from peco_mm.supervisor.launch import run
    with pytest.raises(KeyError, match='auto_scale_lr.base_batch_size'):
        run(str(cls_cfg), str(tmp_path), {'auto_scale_lr.base_batch_size': None}, 'train',
            auto_scale_lr=True)


@no_cuda
@pytest.mark.parametrize('native', [False, True], ids=['no_native_bf16', 'native_bf16'])
def test_amp_config_on_cpu_follows_native_bf16_with_one_log_line(cls_cfg, tmp_path, native,
                                                                 isolated_mmengine, monkeypatch):
    from mmengine.optim import AmpOptimWrapper

    from peco_mm.utils import precision
    monkeypatch.setattr(precision, 'cpu_has_native_bf16', lambda: native)
    want = ('AutocastOptimWrapper', 'this CPU has native bf16') if native else (
        'OptimWrapper', 'No CUDA and no native bf16 on this CPU')
    opts = {'optim_wrapper.type': 'AmpOptimWrapper', 'optim_wrapper.dtype': 'bfloat16'}
    from peco_mm.supervisor.launch import run
    runner = run(str(cls_cfg), str(tmp_path / 'cfg'), opts, 'train').runner
    # (the launcher's non-finite guard subclasses whichever wrapper the config ends up with)
    assert type(runner.optim_wrapper).__name__ == 'NonFiniteGuard' + want[0]
    assert not isinstance(runner.optim_wrapper, AmpOptimWrapper)
    assert run_log(tmp_path / 'cfg').count(want[1]) == 1
    assert all(p.dtype == torch.float32 for p in runner.model.parameters())
    # without CUDA the launcher also keeps freed memory (env_cfg.cpu_malloc='auto'), one line
    assert run_log(tmp_path / 'cfg').count("env_cfg.cpu_malloc='auto': freed CPU memory") == 1
    # --amp through the tool: the same choice, the same single line
    load_tool('train').main([str(cls_cfg), '--work-dir', str(tmp_path / 'flag'), '--amp'])
    log = run_log(tmp_path / 'flag')
    assert log.count(want[1]) == 1 and 'bfloat16' in log


def test_vis_backend_flag_adds_backend_and_names_missing_package(cls_cfg, tmp_path,
                                                                 isolated_mmengine):
    import importlib.util

    from mmengine.config import Config

    from peco_mm.supervisor.launch import add_vis_backends
    cfg = add_vis_backends(Config.fromfile(str(cls_cfg)), ('local',))
    assert [b['type'] for b in cfg.visualizer.vis_backends] == ['LocalVisBackend']
    if importlib.util.find_spec('tensorboard') is not None:
        pytest.skip('tensorboard is installed here')
    train_tool = load_tool('train')
    with pytest.raises(ModuleNotFoundError, match="needs the 'tensorboard' package"):
        train_tool.main([str(cls_cfg), '--work-dir', str(tmp_path / 'tb'),
                         '--vis-backend', 'tensorboard'])
    # the same check for a backend set in the config (the documented config key)
    tb_cfg = cls_cfg.with_name('tb.py')
    tb_cfg.write_text(f"_base_ = '{cls_cfg}'\nvisualizer = dict(vis_backends=["
                      "dict(type='LocalVisBackend'), dict(type='TensorboardVisBackend')])\n")
    with pytest.raises(ModuleNotFoundError, match="needs the 'tensorboard' package"):
        train_tool.main([str(tb_cfg), '--work-dir', str(tmp_path / 'tb')])
    assert not (tmp_path / 'tb').exists()  # refused before the runner started


# ---- test flags ------------------------------------------------------------------------------
@pytest.fixture
def trained(cls_cfg, tmp_path):
    run_tool(['tools/train.py', cls_cfg, '--work-dir', tmp_path / 'wd'])
    return cls_cfg, tmp_path / 'wd' / 'iter_2.pth'


def test_test_out_json_show_dir_and_pkl(trained, tmp_path, isolated_mmengine):
    cfg, ckpt = trained
    metrics, vis = tmp_path / 'm.json', tmp_path / 'vis'
    out = run_tool(['tools/test.py', cfg, ckpt, '--work-dir', tmp_path / 't', '--out', metrics,
                    '--show-dir', vis])
    import json
    acc = json.loads(metrics.read_text())['accuracy/top1']
    assert f'accuracy/top1: {acc:.4f}' in out.stdout + out.stderr
    # mmpretrain's VisualizationHook paints every held-out image as <file name>_<step>.png
    # (the 3 class folders hold 0.png .. 3.png each, so 4 names)
    assert sorted(p.name for p in vis.glob('*.png')) == [f'{i}.png_0.png' for i in range(4)]
    # --out FILE.pkl: every prediction, through run() as the demo calls it
    from peco_mm.supervisor.launch import run
    res = run(str(cfg), str(tmp_path / 't2'), None, 'test', checkpoint=str(ckpt),
              out=str(tmp_path / 'preds.pkl'))
    assert res.metrics['accuracy/top1'] == pytest.approx(acc)
    with open(tmp_path / 'preds.pkl', 'rb') as f:
        preds = pickle.load(f)
    assert len(preds) == 12
    labels = torch.stack([p['gt_label'] for p in preds]).flatten()
    hits = torch.stack([p['pred_label'] for p in preds]).flatten() == labels
    assert hits.float().mean().item() * 100 == pytest.approx(acc)


def test_test_out_with_another_suffix_is_refused(cls_cfg, tmp_path):
    cfg, ckpt = cls_cfg, tmp_path / 'any.pth'
    ckpt.write_bytes(b'')  # refused before it is read
    out = run_tool(['tools/test.py', cfg, ckpt, '--out', tmp_path / 'x.txt'], check=False)
    assert out.returncode != 0 and 'expected FILE.pkl (predictions) or' in out.stderr


def test_run_takes_a_config_object_and_leaves_it_alone(cls_cfg, tmp_path, isolated_mmengine):
    from mmengine.config import Config

    from peco_mm.supervisor.launch import run
    cfg = Config.fromfile(str(cls_cfg))
    text = cfg.pretty_text
    runner = run(cfg, str(tmp_path / 'wd'), {'train_cfg.max_iters': 1}, 'train').runner
    assert runner.iter == 1 and cfg.pretty_text == text
    with pytest.raises(ValueError, match="mode='fit'"):
        run(cfg, str(tmp_path), mode='fit')
    with pytest.raises(ValueError, match='needs checkpoint=PATH'):
        run(cfg, str(tmp_path), mode='test')


def test_sharded_clip_note_only_for_fsdp_with_norm_clipping():
    from mmengine.config import Config

    from peco_mm.supervisor.launch import sharded_clip_note
    fsdp = dict(runner_type='FlexibleRunner', strategy=dict(type='FSDPStrategy'))
    clip = dict(optim_wrapper=dict(clip_grad=dict(max_norm=3.0)))
    assert 'each rank clips its own gradient shard' in sharded_clip_note(Config({**fsdp, **clip}))
    assert sharded_clip_note(Config(fsdp)) is None
    assert sharded_clip_note(Config(clip)) is None
    value = dict(optim_wrapper=dict(clip_grad=dict(type='value', clip_value=1.0)))
    assert sharded_clip_note(Config({**fsdp, **value})) is None  # per element: shards agree


def test_fsdp_config_without_a_distributed_launch_says_how_to_start_it(cls_cfg, tmp_path):
    from peco_mm.supervisor.launch import run
    opts = {'runner_type': 'FlexibleRunner', 'strategy': {'type': 'FSDPStrategy'}}
    with pytest.raises(ValueError, match='needs a distributed launch: tools/dist_train.sh'):
        run(str(cls_cfg), str(tmp_path), opts, 'train')


def test_the_light_cli_offers_every_backend_the_launcher_builds():
    """tools/train.py's --vis-backend choices come from a module that imports no torch, so
    they are written out there: they must be the launcher's backends, no more, no fewer."""
    from peco_mm.supervisor import cli, launch
    assert set(cli.VIS_BACKEND_NAMES) == set(launch.VIS_BACKENDS)
