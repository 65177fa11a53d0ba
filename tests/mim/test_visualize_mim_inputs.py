"""tools/visualize_mim.py as a new user runs it: on the config a training run dumps into its
work dir (the training set wrapped in the launcher's BadSampleGuard), on a folder of images,
twice into one output folder, and without --tokenizer where the config's tokenizer is gone.
The pretraining checkpoint is the tiny model of the config, saved untrained: what is checked
is the tool's handling of its inputs, not what the model learned."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT, load_tool
from tests.mim.conftest import write_config


@pytest.fixture(scope='module')
def dumped_run(images, tokenizer_ckpt, tmp_path_factory):
    """(dumped config, checkpoint): the tiny PeCo config as the launcher dumps it into the work
    dir (BadSampleGuard around the training set), and its model's weights."""
    from mmengine.config import Config
    from mmpretrain.registry import MODELS

    from peco_mm.supervisor.safeguards import guard_train_data
    tmp = tmp_path_factory.mktemp('vis_mim')
    cfg = Config.fromfile(write_config(tmp / 'cfg.py', 'pretrain_vitb_in1k_300e.py',
                                       tokenizer_ckpt[0], images[0]))
    guard_train_data(cfg)
    assert cfg.train_dataloader.dataset.type == 'BadSampleGuard'
    cfg.dump(str(tmp / 'dumped.py'))
    torch.manual_seed(0)
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmpretrain'):  # the run's default scope
        model = MODELS.build(cfg.model)
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, tmp / 'iter_1.pth')
    return str(tmp / 'dumped.py'), str(tmp / 'iter_1.pth')


def test_the_config_a_run_dumps_draws(dumped_run, images, tmp_path, capsys):
    """The work dir's config wraps the training set in BadSampleGuard; the pipeline (mask
    generator, view sizes) is read through it."""
    load_tool('visualize_mim').main([*dumped_run, os.path.join(images[0], '003.png'), '--out',
                                     str(tmp_path), '--device', 'cpu', '--num-masked', '5'])
    assert '003: 5 masked patches' in capsys.readouterr().out
    assert (tmp_path / '003.png').is_file() and (tmp_path / 'grid.png').is_file()


def test_a_folder_draws_and_a_rerun_leaves_no_stale_files(dumped_run, images, tmp_path, capsys):
    tool = load_tool('visualize_mim')
    out = tmp_path / 'vis'
    out.mkdir()
    (out / 'notes.txt').write_text('mine')  # a file of the user's: never touched
    # a folder: its first --num images, sorted
    tool.main([*dumped_run, images[0], '--num', '2', '--out', str(out), '--device', 'cpu'])
    assert sorted(p.name for p in out.iterdir()) == [
        '000.png', '001.png', 'grid.png', 'notes.txt', 'visualize_mim_files.json']
    assert 'wrote 2 rows' in capsys.readouterr().out
    listed = json.loads((out / 'visualize_mim_files.json').read_text())['files']
    assert listed == ['000.png', '001.png', 'grid.png']
    # the rerun, on other images: the first run's PNGs are gone, the user's file stays
    other = tmp_path / 'other'
    other.mkdir()
    for name in ('005.png', '007.png'):
        shutil.copy(os.path.join(images[0], name), other / name.replace('0', 'x', 1))
    tool.main([*dumped_run, str(other / 'x05.png'), str(other / 'x07.png'), '--out', str(out),
               '--device', 'cpu'])
    assert sorted(p.name for p in out.iterdir()) == [
        'grid.png', 'notes.txt', 'visualize_mim_files.json', 'x05.png', 'x07.png']
    assert (out / 'notes.txt').read_text() == 'mine'


def test_images_of_one_name_in_two_folders_get_two_files(tmp_path):
    tool = load_tool('visualize_mim')
    names = tool.output_names(['a/cat/0.png', 'a/dog/0.png', 'b/1.jpg', 'c/grid.png'])
    assert names == ['cat_0.png', 'dog_0.png', '1.png', 'grid_2.png']


def test_a_missing_path_and_an_empty_folder_are_one_line_errors(dumped_run, tmp_path):
    tool = load_tool('visualize_mim')
    (tmp_path / 'empty').mkdir()
    for path, expected in ((tmp_path / 'nope.png', "nope.png' not found; give image files or"),
                           (tmp_path / 'empty', 'no images (.jpg, .jpeg, .png')):
        with pytest.raises(SystemExit) as err:
            tool.main([*dumped_run, str(path), '--out', str(tmp_path / 'o')])
        assert expected in str(err.value) and '\n' not in str(err.value)


def test_without_tokenizer_a_missing_default_is_one_line_and_no_pkg_resources_warning(
        images, tmp_path):
    """Run as a script: the config's tokenizer path is gone, no --tokenizer: one line on stderr
    naming the option and the path (no traceback), and none of setuptools' pkg_resources
    deprecation warning (mmengine imports it while resolving the config's bases)."""
    gone = str(tmp_path / 'work_dirs' / 'tokenizer' / 'epoch_100.pth')
    cfg = write_config(tmp_path / 'cfg.py', 'pretrain_vitb_in1k_300e.py', gone, images[0])
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONWARNINGS',)}
    env['PYTHONPATH'] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, str(ROOT / 'tools' / 'visualize_mim.py'), cfg, 'x.pth',
         os.path.join(images[0], '000.png'), '--out', str(tmp_path / 'o'), '--device', 'cpu'],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "visualize_mim.py: the config's tokenizer checkpoint "
        f"(model.target_generator.checkpoint={gone!r}) not found; pass --tokenizer PATH, the "
        'tokenizer checkpoint whose decoder draws the reconstruction'), proc.stderr
    assert not (tmp_path / 'o').exists()


def test_dataset_pipeline_reads_through_any_dataset_wrapper():
    from peco_mm.datasets.wrapped import dataset_pipeline
    pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
    inner = dict(type='CustomDataset', data_root='d', pipeline=pipeline)
    for loader in (dict(dataset=inner),
                   dict(dataset=dict(type='BadSampleGuard', policy='skip', dataset=inner)),
                   dict(dataset=dict(type='RepeatDataset', times=2, dataset=dict(
                       type='BadSampleGuard', dataset=inner))),
                   dict(dataset=dict(type='ConcatDataset', datasets=[inner, dict(inner)]))):
        assert dataset_pipeline(dict(train_dataloader=loader)) == pipeline
    with pytest.raises(ValueError, match=r'^train_dataloader.dataset: the config has no '
                       r'dataset with a pipeline \(looked through dataset wrappers down to '
                       r'train_dataloader.dataset.dataset.dataset\)'):
        dataset_pipeline(dict(train_dataloader=dict(dataset=dict(
            type='BadSampleGuard', dataset=dict(type='CustomDataset')))))
    with pytest.raises(ValueError, match=r'^val_dataloader.dataset.pipeline is str'):
        dataset_pipeline(dict(val_dataloader=dict(dataset=dict(pipeline='x'))),
                         'val_dataloader')
