"""The pre-flight check: every missing checkpoint and dataset of a config, in one block, once,
before any rank starts (peco_mm.supervisor.preflight, tools/train.py --preflight-only,
tools/dist_train.sh)."""
import os
import subprocess
import sys
import time

import pytest

from peco_mm.supervisor import preflight
from tests.conftest import ROOT

CFG = ROOT / 'configs' / 'peco'


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run with the config's relative paths (data/..., work_dirs/...) resolved in an empty
    folder, and the check switched on whatever the caller's environment says."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(preflight.SKIP_ENV, raising=False)
    return tmp_path


def _problems(name, mode='train', **kw):
    return preflight.find_problems(preflight.load(str(CFG / name)), mode, **kw)


def test_upernet_with_nothing_in_place_lists_checkpoint_and_dataset_once(in_tmp):
    problems = _problems('upernet_vitb_ade20k.py')
    assert [p.key for p in problems] == ['model.backbone.init_cfg.checkpoint',
                                         'train_dataloader.dataset.data_root']
    text = preflight.report(problems, 'upernet_vitb_ade20k.py')
    assert text.startswith('upernet_vitb_ade20k.py: 2 inputs of this config are missing')
    assert "'work_dirs/pretrain_vitb_in1k_800e/epoch_800.pth' not found" in text
    assert 'model.backbone.init_cfg=None to train from scratch' in text
    # the train and val loaders share the root: one problem naming both
    assert text.count('data/ade/ADEChallengeData2016') == 1
    assert '(also val_dataloader)' in text
    assert 'images/{training,validation}/*.jpg' in text and 'sceneparsing' in text


def test_every_kind_of_input_is_checked(in_tmp):
    # tokenizer: the perceptual network (MoCo v3 ViT-B) and ImageNet
    keys = [p.key for p in _problems('tokenizer_vqvae_in1k.py')]
    assert keys == ['model.perceptual.checkpoint', 'train_dataloader.dataset.data_root']
    tok = preflight.report(_problems('tokenizer_vqvae_in1k.py'))
    assert 'moco-v3' in tok and 'tools/convert_checkpoint.py' in tok and 'image-net.org' in tok
    # lambda = 0 builds no perceptual network: only the data is asked for
    keys = [p.key for p in _problems('tokenizer_vqvae_lambda0_in1k.py')]
    assert keys == ['train_dataloader.dataset.data_root']
    # tools/test.py of the tokenizer: the checkpoint to evaluate, the metric's network, val
    keys = [p.key for p in _problems('tokenizer_vqvae_in1k.py', 'test', checkpoint='t.pth')]
    assert keys == ['model.perceptual.checkpoint', 'CHECKPOINT',
                    'test_dataloader.dataset.data_root']
    # pretraining: the tokenizer, with no "from scratch" on offer
    problems = _problems('pretrain_vitb_in1k_800e.py')
    assert [p.key for p in problems][0] == 'model.target_generator.checkpoint'
    assert 'from scratch' not in problems[0].details[-1]
    # a resumed run takes the backbone from its checkpoint; load_from and --resume are checked
    keys = [p.key for p in _problems('upernet_vitb_ade20k.py', resume='auto')]
    assert 'model.backbone.init_cfg.checkpoint' not in keys
    keys = [p.key for p in _problems('upernet_vitb_ade20k.py', resume='gone.pth')]
    assert '--resume' in keys


def test_layouts_below_an_existing_root(in_tmp):
    # COCO: the root exists, the annotation files and the image folders do not
    (in_tmp / 'data' / 'coco').mkdir(parents=True)
    problems = _problems('mask_rcnn_vitb_coco.py')
    assert [p.key for p in problems] == [
        'model.backbone.init_cfg.checkpoint', 'train_dataloader.dataset.ann_file',
        'train_dataloader.dataset.data_prefix.img', 'val_dataloader.dataset.ann_file',
        'val_dataloader.dataset.data_prefix.img']
    # the evaluator reads the val annotation file too: said with it, not again
    assert problems[3].message.endswith("instances_val2017.json' does not exist "
                                        '(also val_evaluator)')
    # ImageNet: train/ without class folders, no meta/train.txt
    (in_tmp / 'data' / 'imagenet' / 'train').mkdir(parents=True)
    problems = _problems('pretrain_vitb_in1k_800e.py')
    assert problems[-1].key == 'train_dataloader.dataset.split'
    assert 'has no class folders' in problems[-1].message
    (in_tmp / 'data' / 'imagenet' / 'train' / 'n01440764').mkdir()
    # one class folder: mmpretrain's ImageNet would stop in its 1000-class assertion
    assert [p.key for p in _problems('pretrain_vitb_in1k_800e.py')] == [
        'model.target_generator.checkpoint', 'train_dataloader.dataset.classes']


def test_nothing_reported_when_everything_is_there(in_tmp):
    for split in ('training', 'validation'):
        for kind in ('images', 'annotations'):
            (in_tmp / 'data' / 'ade' / 'ADEChallengeData2016' / kind / split).mkdir(parents=True)
    (in_tmp / 'work_dirs' / 'pretrain_vitb_in1k_800e').mkdir(parents=True)
    (in_tmp / 'work_dirs' / 'pretrain_vitb_in1k_800e' / 'epoch_800.pth').write_bytes(b'x')
    cfg = preflight.load(str(CFG / 'upernet_vitb_ade20k.py'))
    assert preflight.find_problems(cfg) == []
    preflight.check(cfg)  # raises nothing


def test_check_raises_one_block_and_can_be_skipped(in_tmp, monkeypatch):
    cfg = preflight.load(str(CFG / 'upernet_vitb_ade20k.py'))
    with pytest.raises(FileNotFoundError) as err:  # PreflightError is a FileNotFoundError
        preflight.check(cfg, config='upernet_vitb_ade20k.py')
    assert isinstance(err.value, preflight.PreflightError) and len(err.value.problems) == 2
    assert str(err.value).count('not found') == 1
    monkeypatch.setenv(preflight.SKIP_ENV, '1')
    preflight.check(cfg)


def _shell(args, cwd, **env):
    full = {k: v for k, v in os.environ.items() if k != preflight.SKIP_ENV}
    full.update(OMP_NUM_THREADS='1', PYTHON=sys.executable, PYTHONPATH=str(ROOT), **env)
    start = time.monotonic()
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=120)
    return proc, time.monotonic() - start


def test_dist_train_reports_once_before_any_rank_starts(tmp_path):
    """The issue's case: `tools/dist_train.sh configs/peco/upernet_vitb_ade20k.py 8` with nothing
    in place (run from an empty folder): one block, no traceback, non-zero, in seconds."""
    proc, took = _shell(['bash', ROOT / 'tools/dist_train.sh', CFG / 'upernet_vitb_ade20k.py',
                         '8'], cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert out.count('inputs of this config are missing') == 1
    assert out.count("model.backbone.init_cfg.checkpoint='work_dirs/pretrain_vitb") == 1
    assert out.count("data_root 'data/ade/ADEChallengeData2016' does not exist") == 1
    assert 'Traceback' not in out and 'torch.distributed' not in out
    assert took < 20, f'{took:.1f} s'
    # the flag passes the check by (torchrun then starts; --help stops it at once)
    proc, _ = _shell(['bash', ROOT / 'tools/dist_train.sh', CFG / 'upernet_vitb_ade20k.py', '1',
                      '--skip-preflight', '--help'], cwd=tmp_path)
    assert 'inputs of this config are missing' not in proc.stdout + proc.stderr
    assert '--preflight-only' in proc.stdout


def test_train_py_single_process_prints_the_block_without_traceback(tmp_path):
    proc, _ = _shell([sys.executable, ROOT / 'tools/train.py', CFG / 'mask_rcnn_vitb_coco.py'],
                     cwd=tmp_path)
    assert proc.returncode == 1
    assert 'Traceback' not in proc.stderr
    assert proc.stderr.count('inputs of this config are missing') == 1
    assert "data_root 'data/coco/' does not exist" in proc.stderr


@pytest.mark.parametrize('name', ['finetune_vitb_in1k.py', 'linear_vitb_in1k.py',
                                  'recon_deit_tiny_in1k.py'])
def test_mmpretrain_hosted_configs_check_their_val_folder(in_tmp, name):
    """Their host configs set `val_cfg = dict()`: empty, yet mmengine runs the val loop."""
    (in_tmp / 'data' / 'imagenet' / 'train' / 'n01440764').mkdir(parents=True)
    keys = [p.key for p in _problems(name) if not p.key.endswith('classes')]  # 1 of 1000
    assert 'val_dataloader.dataset.split' in keys, keys
    assert not any(k.startswith('train_dataloader') for k in keys), keys
    (in_tmp / 'data' / 'imagenet' / 'val' / 'n01440764').mkdir(parents=True)
    assert not any(p.key.startswith('val_') and not p.key.endswith('classes')
                   for p in _problems(name))
    # --no-validate drops the loop and the check
    cfg = preflight.load(str(CFG / name), no_validate=True)
    assert preflight.validates(cfg) is False


@pytest.mark.parametrize('name', ['mask_rcnn_vitb_coco.py', 'finetune_vitb_in1k.py'])
def test_the_missing_root_fix_moves_every_key_in_one_round(in_tmp, name):
    """Following the printed fix (PATH = where the data is) leaves no dataset problem: the
    val / test loaders' roots and COCO's evaluator annotation files are named with the train
    loader's."""
    problem = next(p for p in _problems(name) if p.key.endswith('data_root'))
    fix = problem.details[-1].split('--cfg-options ', 1)[1]
    data = in_tmp / 'elsewhere'
    for folder in ('train2017', 'val2017', 'annotations', 'train/n01', 'val/n01'):
        (data / folder).mkdir(parents=True)
    for split in ('train', 'val'):
        (data / 'annotations' / f'instances_{split}2017.json').write_text('{}')
    options = dict(item.replace('PATH', str(data)).split('=', 1) for item in fix.split())
    assert 'val_dataloader.dataset.data_root' in options, fix
    cfg = preflight.load(str(CFG / name), options)
    for mode in ('train', 'test'):
        left = preflight.find_problems(cfg, mode, checkpoint='t.pth' if mode == 'test' else None)
        assert [p.key for p in left if ('dataloader' in p.key or 'evaluator' in p.key)
                and not p.key.endswith('.classes')] == []  # (1 class folder of ImageNet's 1000)


def test_the_report_names_only_flags_that_train_and_test_take():
    from tests.conftest import load_tool
    text = preflight.report([preflight.Problem('k', 'm')])
    flags = [f for f in text.split() if f.startswith('--')]
    assert flags == ['--skip-preflight']
    assert load_tool('train').parse_args(['c.py', *flags]).skip_preflight
    assert load_tool('test').parse_args(['c.py', 'w.pth', *flags]).skip_preflight


def test_resume_in_an_empty_or_misspelt_work_dir_is_refused(in_tmp):
    """mmengine starts from scratch without a word when `--resume` finds no checkpoint."""
    run = in_tmp / 'work_dirs' / 'upernet_run1'
    run.mkdir(parents=True)
    (run / 'iter_8.pth').write_bytes(b'x')
    (in_tmp / 'work_dirs' / 'empty').mkdir()
    cfg = preflight.load(str(CFG / 'upernet_vitb_ade20k.py'))
    empty = 'holds no checkpoint (no *.pth, no last_checkpoint)'
    for work_dir, state in (('work_dirs/upernet_rn1', 'does not exist'),
                            ('work_dirs/empty', empty)):
        cfg.work_dir = work_dir
        problems = preflight.resume_problems(cfg, 'auto')
        assert [p.key for p in problems] == ['--resume'], work_dir
        assert problems[0].message == (f"--resume: work dir '{work_dir}' {state}, "
                                       'nothing to resume')
        assert ('Did you mean --work-dir work_dirs/upernet_run1?' in problems[0].details) == (
            work_dir.endswith('rn1'))
        assert '--resume' in [p.key for p in preflight.find_problems(cfg, resume='auto')]
    cfg.work_dir = str(run)
    assert preflight.resume_problems(cfg, 'auto') == []
    assert preflight.resume_problems(cfg, None) == []  # no resume: a fresh run
    # the launcher's check, before any rank: --work-dir as given
    proc, _ = _shell([sys.executable, ROOT / 'tools/train.py', CFG / 'upernet_vitb_ade20k.py',
                      '--preflight-only', '--resume', '--work-dir', 'work_dirs/upernet_rn1'],
                     cwd=in_tmp)
    assert proc.returncode == 1 and 'Traceback' not in proc.stderr
    assert "--resume: work dir 'work_dirs/upernet_rn1' does not exist" in proc.stderr


def test_an_imagenet_subset_is_named_with_its_class_file_fix(in_tmp):
    for split in ('train', 'val'):
        for name in ('n01', 'n02', 'n03'):
            (in_tmp / 'data' / 'imagenet' / split / name).mkdir(parents=True)
    problem = next(p for p in _problems('finetune_vitb_in1k.py') if 'classes' in p.key)
    assert problem.message == ("train_dataloader: 'data/imagenet/train' has 3 class folders, "
                               "but mmpretrain's ImageNet lists 1000 classes (also "
                               'val_dataloader)')
    fix = problem.details[-1]
    assert fix.startswith('Fix (a subset): list the folders in a file, e.g. ls '
                          'data/imagenet/train > classes.txt, and --cfg-options ')
    (in_tmp / 'classes.txt').write_text('n01\nn02\nn03\n')
    options = dict(o.split('=') for o in fix.split('--cfg-options ')[1].split())
    assert options == {'train_dataloader.dataset.classes': 'classes.txt',
                       'val_dataloader.dataset.classes': 'classes.txt',
                       'test_dataloader.dataset.classes': 'classes.txt',
                       'model.head.num_classes': '3', 'data_preprocessor.num_classes': '3'}
    cfg = preflight.load(str(CFG / 'finetune_vitb_in1k.py'),
                         {k: int(v) if v.isdigit() else v for k, v in options.items()})
    assert not [p for p in preflight.find_problems(cfg) if 'classes' in p.key]


def test_the_preprocessor_class_count_is_checked_only_where_it_is_read(in_tmp):
    """data_preprocessor.num_classes matters only for one-hot targets (Mixup / CutMix): a
    linear probe without them, its head set to the subset's 3 classes, passes; with Mixup the
    preprocessor's 1000 is named."""
    for split in ('train', 'val'):
        for name in ('n01', 'n02', 'n03'):
            (in_tmp / 'data' / 'imagenet' / split / name).mkdir(parents=True)
    (in_tmp / 'classes.txt').write_text('n01\nn02\nn03\n')
    options = {f'{k}.dataset.classes': 'classes.txt'
               for k in ('train_dataloader', 'val_dataloader', 'test_dataloader')}
    options['model.head.num_classes'] = 3
    cfg = preflight.load(str(CFG / 'linear_vitb_in1k.py'), options)
    assert cfg.data_preprocessor.num_classes == 1000
    assert not [p for p in preflight.find_problems(cfg) if 'classes' in p.key]
    cfg = preflight.load(str(CFG / 'linear_vitb_in1k.py'),
                         dict(options, **{'model.train_cfg': dict(augments=[
                             dict(type='Mixup', alpha=0.8)])}))
    assert [p.key for p in preflight.find_problems(cfg) if 'classes' in p.key] == [
        'data_preprocessor.num_classes']


@pytest.mark.parametrize('name, options, key, message', [
    ('upernet_vitb_ade20k.py', {'model.decode_head.num_classes': 88},
     'model.decode_head.num_classes',
     'train_dataloader: the ADE20KDataset classes number 150, but '
     'model.decode_head.num_classes=88'),
    ('mask_rcnn_vitb_coco.py', {'model.roi_head.bbox_head.num_classes': 3},
     'model.roi_head.bbox_head.num_classes',
     'train_dataloader: the CocoDataset classes number 80, but '
     'model.roi_head.bbox_head.num_classes=3'),
])
def test_a_head_of_another_class_count_is_named_before_training(in_tmp, name, options, key,
                                                                message):
    problems = [p for p in preflight.find_problems(preflight.load(str(CFG / name), options))
                if 'classes' in p.key]
    assert [(p.key, p.message) for p in problems] == [(key, message)]
    n = message.split('classes number ')[1].split(',')[0]
    assert problems[0].details[-1].startswith(f'Fix: --cfg-options {key}={n}, or give the '
                                              'dataset the classes of the model')
    # the dataset's own classes (metainfo) that match the head pass
    classes = tuple(f'c{i}' for i in range(int(options[key])))
    both = {**options, **{f'{k}_dataloader.dataset.metainfo': dict(classes=classes)
                          for k in ('train', 'val', 'test')}}
    if 'roi_head' in key:
        both['model.roi_head.mask_head.num_classes'] = len(classes)
    else:
        both['model.auxiliary_head.num_classes'] = len(classes)
    cfg = preflight.load(str(CFG / name), both)
    assert not [p for p in preflight.find_problems(cfg) if 'classes' in p.key]
