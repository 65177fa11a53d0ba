"""`make demo` in its --quick form (every run a few iterations): the report has every section,
image and spread over seeds, each stage ran its configs/demo/ config where the next stage reads
it, the images show what they claim, and the data generators are deterministic and in the
layouts the host datasets read."""
import re

import numpy as np
import pytest
from PIL import Image

from tests.conftest import ROOT, load_tool, run_tool

SECTIONS = ['## Data', '## 1. Perceptual network', '## 2. Tokenizer', '## 3. PeCo masked image',
            '## Loss curves', '## 4. Dense fine-tuning', '## Where these numbers stand']
IMAGES = ['reconstructions.png', 'codebook_usage.png', 'codebook_perplexity.png',
          'accuracy.png', 'loss_curves.png', 'dense_loss_curves.png', 'mim/grid.png']


@pytest.fixture(scope='module')
def quick_demo(tmp_path_factory):
    wd = tmp_path_factory.mktemp('demo')
    proc = run_tool(['tools/demo.py', '--quick', '--seeds', '2', '--work-dir', wd], timeout=900,
                    env=dict(OMP_NUM_THREADS='2'))
    return wd, proc.stdout + proc.stderr


def row(text: str, start: str) -> list[str]:
    return next(ln for ln in text.splitlines() if ln.startswith(start)).split('|')[2:-1]


def test_quick_demo_report_has_every_section_image_and_spread(quick_demo):
    wd, log = quick_demo
    assert f'report: {wd / "report.md"}' in log
    for n in range(7):  # visible progress: every stage announced
        assert re.search(rf'==> \[\s*\d+ s\] {n}\. ', log), n
    # one line per run with an overall ETA (1 MoCo v3, 2 x 2 tokenizers, 1 pretraining,
    # 2 x 4 dense runs); the runs' own logs go to their console.log, not the console
    runs = re.findall(r'\] run (\d+) of (\d+): .+ \((ETA [^)]+)\)$', log, re.M)
    assert [(int(k), int(n)) for k, n, _ in runs] == [(k, 14) for k in range(1, 15)]
    assert runs[0][2] == 'ETA after the first run' and re.fullmatch(r'ETA \d+m\d\ds', runs[1][2])
    assert len(log.splitlines()) < 100 and 'Iter(train)' not in log
    assert 'Iter(train)' in (wd / 'pretrain' / 'console.log').read_text()
    text = (wd / 'report.md').read_text()
    assert '$' not in text  # every template field filled
    assert 'toy-scale run' in text and '84.5' in text and '48.5' in text  # vs the paper
    pos = [text.index(s) for s in SECTIONS]
    assert pos == sorted(pos)
    for name in IMAGES:
        assert f'(report_files/{name})' in text, name
        assert (wd / 'report_files' / name).stat().st_size > 1000, name
    # every cell of the tokenizer and dense tables: mean ± std over the 2 seeds, and the values
    # (after 1 epoch Mask R-CNN finds nothing, and mmdet's CocoMetric reports no AP: '—')
    spread = r' -?\d+\.\d+ ± \d+\.\d+ \(-?\d+\.\d+, -?\d+\.\d+\) '
    for start in ('| pixel only (lambda = 0) |', '| PeCo (lambda = 1) |'):
        cells = row(text, start)
        assert all(re.fullmatch(spread, c) for c in cells[:2] + cells[3:]), (start, cells)
    for start in ('| PeCo |', '| scratch |'):
        cells = row(text, start)
        assert all(re.fullmatch(spread, c) for c in cells[:2]), (start, cells)
        assert all(re.fullmatch(spread, c) or c == ' — ' for c in cells[2:]), (start, cells)
    psnr = float(row(text, '| PeCo (lambda = 1) |')[0].split()[0])
    assert 5 < psnr < 60
    assert 0 <= float(row(text, '| PeCo |')[0].split()[0]) <= 100  # mIoU from mmseg
    assert re.search(r'Perceptual minus pixel-only, per seed: PSNR [-+]\d', text)
    assert re.search(r'PeCo minus scratch, per seed: mIoU [-+]\d.* \(higher in \d of 2\)', text)
    trained, random_ = row(text, '| MoCo v3 (stage 1) |'), row(text, '| same ViT, 3 random ')
    assert all(0 <= float(c.strip(' %')) <= 100 for c in trained)
    assert all(re.fullmatch(r' \d+\.\d ± \d+\.\d \(.*\) % ', c) for c in random_), random_


def test_each_stage_ran_its_config_where_the_next_reads_it(quick_demo):
    """The configs' own paths (work_dirs/demo/... moved under the work dir) connect the
    stages: the converted MoCo v3 net, the seed-0 tokenizer and the PeCo weights are where
    tokenizer_tiny_photos.py, pretrain_tiny_photos.py and the dense configs read them."""
    from mmengine.config import Config
    wd, _ = quick_demo
    runs = {'mocov3': 'iter_4.pth', 'tokenizer': 'iter_4.pth', 'tokenizer_lambda0': 'iter_4.pth',
            'tokenizer_seed1': 'iter_4.pth', 'tokenizer_lambda0_seed1': 'iter_4.pth',
            'pretrain': 'iter_4.pth', 'upernet_peco': 'iter_4.pth',
            'upernet_scratch_seed1': 'iter_4.pth', 'mask_rcnn_peco_seed1': 'epoch_1.pth',
            'mask_rcnn_scratch': 'epoch_1.pth'}
    for d, ckpt in runs.items():
        assert (wd / d / ckpt).is_file(), (d, ckpt)
    assert (wd / 'mocov3' / 'mocov3_vit_tiny_pecovit.pth').is_file()
    tok = Config.fromfile(str(wd / 'tokenizer' / 'tokenizer_tiny_photos.py'))
    assert tok.model.perceptual_cfg.checkpoint == str(wd / 'mocov3' /
                                                      'mocov3_vit_tiny_pecovit.pth')
    assert tok.randomness.seed == 0
    assert Config.fromfile(str(wd / 'tokenizer_seed1' / 'tokenizer_tiny_photos.py')
                           ).randomness.seed == 1
    pre = Config.fromfile(str(wd / 'pretrain' / 'pretrain_tiny_photos.py'))
    assert str(wd / 'tokenizer') in str(pre.model.target_generator)
    seg = Config.fromfile(str(wd / 'upernet_peco' / 'upernet_tiny_shapes.py'))
    assert seg.model.backbone.init_cfg.checkpoint.startswith(str(wd / 'pretrain'))
    scratch = Config.fromfile(str(wd / 'upernet_scratch' / 'upernet_tiny_shapes.py'))
    assert scratch.model.backbone.init_cfg is None
    assert seg.train_dataloader.dataset.data_root.startswith(str(wd / 'data'))


def test_reconstruction_grid_rows(quick_demo):
    """Top row: the held-out originals, exactly; rows 2-3: reconstructions that differ."""
    wd, _ = quick_demo
    grid = np.asarray(Image.open(wd / 'report_files' / 'reconstructions.png'))[::2, ::2]
    files = sorted((wd / 'data' / 'imagenet' / 'val').glob('*/*.png'))
    first = np.asarray(Image.open(files[0]).convert('RGB'))
    np.testing.assert_array_equal(grid[2:66, 2:66], first)
    assert grid.shape[0] == 3 * 66 + 2
    assert np.abs(grid[68:132, 2:66].astype(int) - first).mean() > 1  # a reconstruction


def test_full_demo_runs_each_config_as_written(tmp_path):
    """Without --quick a stage's config is the shipped one but for its work_dirs/demo/ paths
    (under the work dir) and the seed; --quick scales the iteration schedule to 4 steps."""
    from mmengine.config import Config
    tool = load_tool('demo')
    for name in ('tokenizer_tiny_photos.py', 'pretrain_tiny_photos.py',
                 'upernet_tiny_shapes.py', 'mask_rcnn_tiny_shapes.py'):
        shipped = Config.fromfile(str(ROOT / 'configs' / 'demo' / name))
        cfg = tool.Demo(str(tmp_path), quick=False, seeds=1).config(name, seed=2)
        assert cfg.train_cfg == shipped.train_cfg and cfg.randomness.seed == 2
        assert cfg.param_scheduler == shipped.param_scheduler
        assert cfg.train_dataloader.batch_size == shipped.train_dataloader.batch_size
        assert 'work_dirs/demo' not in cfg.pretty_text and str(tmp_path) in cfg.pretty_text
    quick = tool.Demo(str(tmp_path), quick=True, seeds=1).config('pretrain_tiny_photos.py')
    assert quick.train_cfg.max_iters == 4 and quick.train_dataloader.batch_size == 8
    assert all(0 <= s.begin < s.end <= 4 for s in quick.param_scheduler)
    # the schedule is scaled, not restated: warm-up (0, 20) and cosine (20, 200) of 200
    # iterations become (0, 1) and (0, 4) of 4
    cfg = Config(dict(
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=200, val_interval=50),
        param_scheduler=[dict(type='LinearLR', by_epoch=False, begin=0, end=20),
                         dict(type='CosineAnnealingLR', by_epoch=False, begin=20, end=200)],
        default_hooks=dict(checkpoint=dict(interval=200), logger=dict(interval=10)),
        custom_hooks=[dict(type='CodebookHealthHook', interval=10)],
        train_dataloader=dict(batch_size=32)))
    tool.shorten_schedule(cfg, 4, 1, 8)
    assert [(s.begin, s.end) for s in cfg.param_scheduler] == [(0, 1), (0, 4)]
    assert (cfg.train_cfg.max_iters, cfg.train_cfg.val_interval) == (4, 4)
    assert cfg.default_hooks.checkpoint.interval == 4 and cfg.custom_hooks[0].interval == 4
    quick_demo = tool.Demo(str(tmp_path), quick=True, seeds=1)
    det = quick_demo.config('mask_rcnn_tiny_shapes.py', scratch=True)
    assert det.train_cfg.max_epochs == 1 and det.model.backbone.init_cfg is None


def test_view_retrieval_rewards_invariance_only():
    """Features that ignore what the augmentation changes find every view; features the
    augmentation destroys, or that tell nothing apart, do not."""
    import torch

    from peco_mm.tooling.demo_checks import view_retrieval
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (16, 16, 3), dtype=np.uint8) for _ in range(20)]
    grey = [[], [dict(type='RandomGrayscale', prob=1.0, keep_channels=True,
                      channel_weights=(0.114, 0.587, 0.2989))]]  # view 2: grey-scale

    def luma_layout(x):  # (N, 3, 16, 16) -> (N, 16): 4x4 brightness, grey-scale invariant
        w = torch.tensor([0.2989, 0.587, 0.114]).view(1, 3, 1, 1)
        return torch.nn.functional.avg_pool2d((x * w).sum(1, keepdim=True), 4).flatten(1)

    def colour(x):  # mean colour, centred: what grey-scale removes
        m = x.mean((2, 3))
        return m - m.mean(1, keepdim=True)

    assert view_retrieval(luma_layout, images, grey, mean=(0, 0, 0), std=(1, 1, 1)) == dict(
        top1=100.0, top5=100.0)
    assert view_retrieval(colour, images, grey, mean=(0, 0, 0), std=(1, 1, 1))['top1'] < 20
    same = view_retrieval(lambda x: torch.ones(len(x), 4), images, [[], []])
    assert same == dict(top1=0.0, top5=0.0)  # ties never count as found


def test_demo_data_is_deterministic_and_in_host_layouts(tmp_path):
    from peco_mm.tooling.demo_data import HELD_OUT_PHOTOS, make_demo_data
    a = make_demo_data(tmp_path / 'a', quick=True)
    make_demo_data(tmp_path / 'b', quick=True)
    fa = sorted(p.relative_to(tmp_path / 'a') for p in (tmp_path / 'a').rglob('*') if p.is_file())
    fb = sorted(p.relative_to(tmp_path / 'b') for p in (tmp_path / 'b').rglob('*') if p.is_file())
    assert fa == fb and len(fa) > 100
    for rel in fa[::17]:
        assert (tmp_path / 'a' / rel).read_bytes() == (tmp_path / 'b' / rel).read_bytes(), rel
    assert sorted(p.name for p in (a['imagenet'] / 'val').iterdir()) == sorted(HELD_OUT_PHOTOS)
    # the host datasets read them: mmseg ADE20K and mmdet COCO
    from mmdet.datasets import CocoDataset
    from mmseg.datasets import ADE20KDataset
    ade = ADE20KDataset(data_root=str(a['ade']), data_prefix=dict(
        img_path='images/validation', seg_map_path='annotations/validation'), pipeline=[])
    assert len(ade) == 4
    lab = np.asarray(Image.open(ade[0]['seg_map_path']))
    assert set(np.unique(lab)) <= {0, 1, 2, 3} and len(np.unique(lab)) > 1
    coco = CocoDataset(data_root=str(a['coco']), ann_file='annotations/instances_val2017.json',
                       data_prefix=dict(img='val2017/'), pipeline=[])
    assert len(coco) == 4 and all(len(coco[i]['instances']) == 2 for i in range(4))
    # shapes are painted on photos, not on flat noise: backgrounds vary a lot
    img = np.asarray(Image.open(ade[0]['img_path']))
    assert img[lab == 0].std() > 20
