"""Bad files are named: `tools/check_dataset.py` lists every one with its reason, and a
training run stops at one naming the file (default) or skips it (`bad_samples`)."""
import io
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from tests.conftest import ROOT, load_tool, run_tool
from tests.dense.conftest import TINY_UPERNET, write_cfg
from tests.reliability.conftest import run_log, write_cls


def jpeg_bytes(seed=0) -> bytes:
    img = np.random.default_rng(seed).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, 'JPEG')
    return buf.getvalue()


@pytest.fixture
def bad_folder(cls_data):
    """The tiny ImageNet-layout folder with a truncated JPEG, a JPEG of garbage bytes and a
    zero-byte PNG among its 12 good training images."""
    train = cls_data / 'train'
    data = jpeg_bytes()
    bad = {train / 'red' / 'truncated.jpg': data[:len(data) // 2],
           train / 'green' / 'garbage.jpg': b'\xff\xd8\xff' + bytes(range(256)) * 4,
           train / 'blue' / 'empty.png': b''}
    for path, content in bad.items():
        path.write_bytes(content)
    return cls_data, {str(p): None for p in bad}


def test_check_dataset_reports_every_bad_file(tmp_path, bad_folder):
    data, bad = bad_folder
    cfg = write_cls(tmp_path / 'cls.py', data)
    res = run_tool(['tools/check_dataset.py', cfg, '--split', 'train', 'val', '--workers', '2'],
                   check=False)
    assert res.returncode == 1, res.stdout + res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith('BAD ')]
    reported = dict(ln[4:].split(': ', 1) for ln in lines)
    assert set(reported) == set(bad)
    assert reported[str(data / 'train/blue/empty.png')] == 'empty file (0 bytes)'
    assert 'truncated' in reported[str(data / 'train/red/truncated.jpg')]
    assert 'cannot be decoded' in reported[str(data / 'train/green/garbage.jpg')]
    assert 'checking 21 images of train, val with 2 workers' in res.stdout  # 15 + 6
    assert '3 bad file(s)' in res.stdout and '21/21' in res.stderr  # the progress bar


def test_check_dataset_all_good(tmp_path, cls_data, isolated_mmengine, capsys):
    cfg = write_cls(tmp_path / 'cls.py', cls_data)
    status, out = check_dataset([cfg, '--workers', '0'], capsys)
    assert status == 0 and 'checking 18 images of train, val' in out
    assert out.rstrip().endswith('all files are good')


def test_check_dataset_help_is_fast():
    code = ("import runpy, sys; sys.argv = ['check_dataset.py', '--help']\n"
            "try:\n    runpy.run_path('tools/check_dataset.py', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print('torch imported:', 'torch' in sys.modules)")
    res = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True)
    # no torch beyond what mmengine's config module imports (0.10.7: none; 0.10.6: torch)
    host = subprocess.run([sys.executable, '-c', 'import sys, mmengine.config; '
                           "print('torch imported:', 'torch' in sys.modules)"],
                          cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert host in res.stdout and '--workers' in res.stdout
    assert 'examples:' in res.stdout and '--split' in res.stdout


def test_training_stops_naming_the_bad_file(tmp_path, bad_folder, isolated_mmengine):
    from peco_mm.supervisor.launch import run
    data, bad = bad_folder
    cfg = write_cls(tmp_path / 'cls.py', data, iters=4, interval=100)
    with pytest.raises(RuntimeError) as err:
        run(str(cfg), str(tmp_path / 'work'))
    msg = str(err.value)
    assert msg.split(': training sample')[0] in bad
    assert 'tools/check_dataset.py CONFIG' in msg and "policy='skip'" in msg


def test_training_skips_bad_files_up_to_the_limit(tmp_path, bad_folder, isolated_mmengine):
    from peco_mm.supervisor.launch import run
    data, bad = bad_folder
    # 4 steps x 4 images = 16 >= 15 training files: every file is read once
    cfg = write_cls(tmp_path / 'cls.py', data, iters=4, interval=100,
                    extra="bad_samples = dict(policy='skip', max_skips=3)\n")
    run(str(cfg), str(tmp_path / 'work'))
    log = run_log(tmp_path / 'work')
    skipped = {ln.split('skipped bad sample ')[1].split(' (')[0]
               for ln in log.splitlines() if 'skipped bad sample' in ln}
    assert skipped == set(bad)
    assert 'of max_skips=3' in log
    cfg = write_cls(tmp_path / 'cls2.py', data, iters=4, interval=100,
                    extra="bad_samples = dict(policy='skip', max_skips=1)\n")
    with pytest.raises(RuntimeError, match='more than bad_samples.max_skips=1 samples'):
        run(str(cfg), str(tmp_path / 'work2'))


# ---- dense labels ---------------------------------------------------------------------------
def damage_labels(ade):
    """Three training label maps that do not fit their 64x96 images."""
    ann = ade / 'annotations' / 'training'
    files = sorted(ann.glob('*.png'))
    label = np.array(Image.open(files[0]))  # (64, 96)
    Image.fromarray(label[:32, :48]).save(files[0])  # smaller
    Image.fromarray(np.array(Image.open(files[1])).T.copy()).save(files[1])  # transposed
    rgb = np.repeat(np.array(Image.open(files[2]))[..., None], 3, axis=2)
    Image.fromarray(rgb).save(files[2])  # an RGB rendering of the same classes
    return {str(files[0]): 'label map is 32x48 (HxW) but its image is 64x96: smaller than '
                           'its image',
            str(files[1]): 'label map is 96x64 (HxW) but its image is 64x96: transposed',
            str(files[2]): 'label map has 3 channels (shape (64, 96, 3))'}


@pytest.mark.parametrize('which', [0, 1, 2])
def test_seg_label_check_names_the_file(ade_root, which):
    from mmcv.transforms import LoadImageFromFile
    from mmseg.datasets.transforms import LoadAnnotations

    from peco_mm.datasets.seg_checks import CheckSegLabels
    expected = list(damage_labels(ade_root).items())[which]
    img = str(ade_root / 'images' / 'training' / (expected[0].split('/')[-1][:-4] + '.jpg'))
    results = dict(img_path=img, seg_map_path=expected[0], reduce_zero_label=True,
                   seg_fields=[])
    results = LoadAnnotations()(LoadImageFromFile()(results))
    with pytest.raises(ValueError) as err:
        CheckSegLabels(num_classes=3)(results)
    assert str(err.value).startswith(f'{expected[0]}: {expected[1]}')


def check_dataset(args, capsys):
    """tools/check_dataset.py in this process: (exit status, stdout)."""
    status = load_tool('check_dataset').main([str(a) for a in args])
    return status, capsys.readouterr().out


def test_seg_labels_in_tool_and_run(tmp_path, ade_root, isolated_mmengine, capsys):
    from peco_mm.supervisor.launch import run
    expected = damage_labels(ade_root)
    expected.update(damage_label_values(ade_root))  # named by the tool, not by mmseg
    cfg = write_cfg(tmp_path / 'upernet.py', TINY_UPERNET, data=ade_root, lr=1e-3, iters=8)
    status, out = check_dataset([cfg, '--split', 'train'], capsys)
    assert status == 1 and out.count('BAD ') == 5, out
    for path, why in expected.items():
        assert f'BAD {path}: {why}' in out
    with pytest.raises(RuntimeError) as err:  # the run stops at the first it reads
        run(str(cfg), str(tmp_path / 'work'))
    assert any(f'{path}: {why}' in str(err.value) for path, why in expected.items())


WRAPPED = ('label map is 16-bit with values up to 300: mmseg reads label maps as 8 bits, so '
           'values above 255 wrap around (300 is read as 44); save class indices 0..255 in an '
           '8-bit PNG')


def damage_label_values(ade):
    """A 16-bit label map (mmseg reads 8 bits: 300 -> 44, a valid class of 150) and an 8-bit
    one with a value outside the model's 150 classes, among the training label maps."""
    import cv2
    files = sorted((ade / 'annotations' / 'training').glob('*.png'))
    wide = np.array(Image.open(files[3])).astype(np.uint16)
    wide[0, 0] = 300
    cv2.imwrite(str(files[3]), wide)  # a 16-bit PNG
    high = np.array(Image.open(files[4]))
    high[0, :3] = 200  # 199 after reduce_zero_label, not below 150
    Image.fromarray(high).save(files[4])
    return {str(files[3]): WRAPPED,
            str(files[4]): 'label values [199] are outside the 150 classes (allowed: 0..149 and '
                           'ignore_index=255, after reduce_zero_label maps 0 -> ignore and k -> '
                           'k-1)'}


def test_16bit_label_map_is_named_by_the_training_check(ade_root):
    from mmcv.transforms import LoadImageFromFile
    from mmseg.datasets.transforms import LoadAnnotations

    from peco_mm.datasets.seg_checks import CheckSegLabels
    path = next(iter(damage_label_values(ade_root)))
    img = str(ade_root / 'images' / 'training' / (path.split('/')[-1][:-4] + '.jpg'))
    results = LoadAnnotations()(LoadImageFromFile()(dict(
        img_path=img, seg_map_path=path, reduce_zero_label=True, seg_fields=[])))
    assert results['gt_seg_map'][0, 0] == 43  # what training would learn: a valid class
    with pytest.raises(ValueError) as err:
        CheckSegLabels(num_classes=150)(results)
    assert str(err.value) == f'{path}: {WRAPPED}'


def test_check_dataset_on_coco(tmp_path, coco_root, isolated_mmengine, capsys):
    from tests.dense.conftest import TINY_MASK_RCNN
    cfg = write_cfg(tmp_path / 'mrcnn.py', TINY_MASK_RCNN, data=coco_root, lr=1e-3, epochs=1)
    images = sorted((coco_root / 'train2017').glob('*.jpg'))
    images[0].write_bytes(b'')
    status, out = check_dataset([cfg, '--split', 'train', 'val', '--workers', '0'], capsys)
    assert status == 1 and f'BAD {images[0]}: empty file (0 bytes)' in out
    assert out.count('BAD ') == 1
    images[1].unlink()  # listed in the annotation file, missing on disk: named at build
    status, out = check_dataset([cfg, '--split', 'train'], capsys)
    assert status == 1 and 'BAD train_dataloader.dataset: FileNotFoundError: ' in out
    assert images[1].name in out


def test_a_step_failing_after_the_file_was_read_is_named_not_the_file(cls_data):
    """A transform error (settings, library versions) is not a bad file: the error names the
    step; under policy='skip' the reason names it too."""
    from mmcv.transforms import BaseTransform
    from mmpretrain.datasets import CustomDataset

    from peco_mm.datasets.bad_samples import BadSampleGuard

    class FailsOnBlue(BaseTransform):
        def transform(self, results):
            if '/blue/' in results['img_path']:
                raise OverflowError('Python integer -114 out of bounds for uint8')
            return results

    ds = CustomDataset(data_root=str(cls_data / 'train'),
                       pipeline=[dict(type='LoadImageFromFile'), FailsOnBlue()])
    blue = next(i for i in range(len(ds)) if '/blue/' in ds.get_data_info(i)['img_path'])
    with pytest.raises(RuntimeError, match=r'blue/.*: training sample \d+ was read, then the '
                       r'pipeline step FailsOnBlue failed on it \(OverflowError: Python integer'
                       r'.*tools/check_dataset\.py checks the files, not the transforms'):
        BadSampleGuard(ds)[blue]
    with pytest.raises(RuntimeError, match=r'max_skips=0 samples failed to load; the last: '
                       r'OverflowError: .*, raised in the pipeline step FailsOnBlue'):
        BadSampleGuard(ds, policy='skip', max_skips=0)[blue]
    other = next(i for i in range(len(ds)) if '/blue/' not in ds.get_data_info(i)['img_path'])
    assert BadSampleGuard(ds)[other]['img_path'].endswith('.png')


# ---- videos ---------------------------------------------------------------------------------
VIDEO_PIPELINE = [dict(type='DecordInit'),
                  dict(type='SampleFrames', clip_len=2, frame_interval=2, num_clips=1,
                       test_mode=True),
                  dict(type='DecordDecode')]


@pytest.fixture
def video_list(tmp_path):
    """4 tiny clips ('file label' list) of which c1_0.mp4 is cut in half."""
    from tests.models.test_video_vit import write_videos
    listing = write_videos(tmp_path / 'videos', per_class=2, seed=0)
    cut = listing.parent / 'c1_0.mp4'
    cut.write_bytes(cut.read_bytes()[:cut.stat().st_size // 2])
    return listing


def test_a_corrupt_video_is_named_not_its_index(video_list):
    from mmaction.datasets import VideoDataset
    from mmengine.registry import DefaultScope

    from peco_mm.datasets.bad_samples import BadSampleGuard
    with DefaultScope.overwrite_default_scope('mmaction'):
        ds = VideoDataset(ann_file=str(video_list),
                          data_prefix=dict(video=str(video_list.parent)),
                          pipeline=VIDEO_PIPELINE)
        cut = next(i for i in range(len(ds)) if ds.get_data_info(i)['filename'].endswith(
            'c1_0.mp4'))
        with pytest.raises(RuntimeError) as err:
            BadSampleGuard(ds)[cut]
    assert str(err.value).startswith(f'{video_list.parent / "c1_0.mp4"}: training sample '
                                     f'{cut} failed to load (')


def video_cfg(tmp_path, listing):
    """The tiny TimeSformer config of the video tests on `listing` (train and val)."""
    import textwrap

    from tests.models.test_video_vit import TINY_VIDEO_CFG
    cfg = tmp_path / 'timesformer_tiny.py'
    cfg.write_text(textwrap.dedent(TINY_VIDEO_CFG.format(
        base=str(ROOT / 'configs/peco/timesformer_vitb_k400.py'), test_mode='True',
        train=str(listing), train_root=str(listing.parent), val=str(listing),
        val_root=str(listing.parent))))
    return cfg


def mislabel(listing):
    """c0_1 labelled 7 (the head has 2 classes), c1_1 without a label."""
    text = listing.read_text().replace('c0_1.mp4 0', 'c0_1.mp4 7')
    listing.write_text(text.replace('c1_1.mp4 1', 'c1_1.mp4'))
    return {str(listing.parent / 'c0_1.mp4'): 'label 7 is outside the 2 classes of '
            'model.cls_head.num_classes (allowed: 0..1)',
            str(listing.parent / 'c1_1.mp4'): 'no label (its annotation line names only the '
            'file); expected a class index 0..1'}


def test_check_dataset_checks_videos_and_their_labels(tmp_path, video_list, isolated_mmengine,
                                                      capsys):
    expected = mislabel(video_list)
    status, out = check_dataset([video_cfg(tmp_path, video_list), '--split', 'train',
                                 '--workers', '0'], capsys)
    assert status == 1 and 'checking 4 videos of train with 0 workers' in out, out
    for path, why in expected.items():
        assert f'BAD {path}: {why}\n' in out
    cut = video_list.parent / 'c1_0.mp4'
    assert f'BAD {cut}: cannot be decoded as a video ({cut.stat().st_size} bytes; ' in out
    assert out.count('BAD ') == 3 and out.rstrip().endswith('3 bad file(s)')


def test_training_stops_naming_video_labels_the_head_cannot_learn(tmp_path, video_list,
                                                                  isolated_mmengine):
    from peco_mm.supervisor.launch import run
    expected = mislabel(video_list)
    with pytest.raises(ValueError) as err:
        run(str(video_cfg(tmp_path, video_list)), str(tmp_path / 'work'))
    first, second = expected.items()
    assert str(err.value) == (
        f'train_dataloader.dataset: 2 sample(s) with a label the model cannot learn: '
        f'{first[0]}: {first[1]}; {second[0]}: {second[1]}. Fix the annotation file (one '
        '"file label" line per sample) or the head\'s num_classes; tools/check_dataset.py '
        'CONFIG lists them all.')


def test_an_empty_validation_list_is_named(tmp_path):
    """mmengine fails on an empty list with numpy's 'need at least one array to concatenate'
    while it builds the loop; the launcher's check names the list instead."""
    from types import SimpleNamespace

    from mmaction.datasets import VideoDataset
    from mmengine.config import Config

    from peco_mm.supervisor.safeguards import built_loop
    empty = tmp_path / 'empty.txt'
    empty.write_text('')

    class Runner(SimpleNamespace):
        @property
        def val_loop(self):  # as mmengine builds it: the dataset first
            return VideoDataset(ann_file=str(empty), pipeline=[])

    runner = Runner(cfg=Config(dict(val_dataloader=dict(dataset=dict(ann_file=str(empty))))))
    with pytest.raises(ValueError) as err:
        built_loop(runner, 'val')
    assert str(err.value) == (f'val_dataloader.dataset is empty: {empty} lists no sample; '
                              'check its ann_file and data_prefix')
    assert 'need at least one array to concatenate' in str(err.value.__cause__)


def test_labels_are_checked_against_classifier_heads_only():
    """A MIM head's num_classes is its codebook size: a pretraining set's labels (e.g. the
    21841 classes of ImageNet-22k against 8192 codes) are not learned, so not checked."""
    from peco_mm.supervisor.label_checks import classifier_classes, label_problem
    head = dict(num_classes=8192)
    assert classifier_classes(dict(model=dict(type='PeCo', head=head))) is None
    assert classifier_classes(dict(model=dict(type='mmpretrain.ImageClassifier', head=head))
                              ) == ('model.head.num_classes', 8192)
    assert classifier_classes(dict(model=dict(type='Recognizer3D', cls_head=dict(
        num_classes=174)))) == ('model.cls_head.num_classes', 174)
    assert label_problem([0, 3], 3, 'k') == 'label 3 is outside the 3 classes of k (allowed: 0..2)'
    assert label_problem(np.array([2]), 3, 'k') is None
