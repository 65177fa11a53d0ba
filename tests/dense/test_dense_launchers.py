"""UperNet (ADE20K format) and Mask R-CNN (COCO format) through tools/train.py, tools/test.py and
tools/dist_train.sh on data the tests write; mmseg's IoUMetric and mmdet's CocoMetric score them,
and test.py's --out and --show-dir write what the hosts' own test.py would.
"""
import json
import pickle
import re

import pytest

from tests.conftest import run_log, run_tool
from tests.dense.conftest import TINY_MASK_RCNN, TINY_UPERNET, write_cfg

pytestmark = pytest.mark.slow  # UperNet / Mask R-CNN trainings, two on two processes


def val_scalars(work_dir):
    """The validation records mmengine wrote to vis_data/scalars.json (newest run)."""
    path = sorted(work_dir.glob('*/vis_data/scalars.json'))[-1]
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in recs if 'loss' not in r]


def logged(text, key):
    return float(re.findall(rf'{re.escape(key)}: (-?[\d.]+)', text)[-1])


def test_upernet_trains_and_scores_miou(tmp_path, ade_root):
    cfg = write_cfg(tmp_path / 'upernet_tiny.py', TINY_UPERNET, data=ade_root, lr=1e-3,
                    iters=16)
    wd = tmp_path / 'wd'
    run_tool(['tools/train.py', cfg, '--work-dir', wd, '--cfg-options', 'randomness.seed=0'])
    val = val_scalars(wd)[-1]
    # 3 flat-coloured classes on gray "other" (ignored): far above chance (1/150) in 16 steps
    assert 50.0 < val['mIoU'] <= 100.0 and val['aAcc'] > 80.0, val
    # the test launcher reloads the checkpoint and gets the same single-scale numbers
    out = run_tool(['tools/test.py', cfg, wd / 'iter_16.pth', '--work-dir', tmp_path / 'test',
                    '--out', tmp_path / 'preds.pkl', '--show-dir', tmp_path / 'vis'])
    log = out.stdout + out.stderr
    assert abs(logged(log, 'mIoU') - val['mIoU']) < 1e-6
    assert abs(logged(log, 'aAcc') - val['aAcc']) < 1e-6
    # --out: one prediction per validation image; --show-dir: one painted image each
    preds = pickle.loads((tmp_path / 'preds.pkl').read_bytes())
    assert len(preds) == 2 and preds[0]['pred_sem_seg']['data'].shape[-2:] == (64, 96)
    assert len(list((tmp_path / 'vis' / 'vis_data' / 'vis_image').glob('*.png'))) == 2


def test_mask_rcnn_trains_on_two_processes_and_scores_coco_ap(tmp_path, coco_root):
    """As UperNet: two training processes (CocoMetric gathers both ranks' predictions and
    evaluates both annotation types), then tools/test.py in one process."""
    cfg = write_cfg(tmp_path / 'mask_rcnn_tiny.py', TINY_MASK_RCNN, data=coco_root, lr=1e-3,
                    epochs=3)  # 2 epochs on two processes can end with no detection to score
    wd = tmp_path / 'wd'
    out = run_tool(['bash', 'tools/dist_train.sh', cfg, '2', '--work-dir', wd,
                    '--cfg-options', 'randomness.seed=0'], timeout=600)
    log = out.stdout + out.stderr
    assert 'Distributed launcher: pytorch' in log, log[-2000:]
    # COCO evaluation ran for boxes and masks (pycocotools' own progress lines are kept off the
    # console by the launcher; its metrics are in the log and the scalars)
    assert re.search(r'coco/bbox_mAP: [\d.]+ .*coco/segm_mAP: [\d.]+', run_log(wd)), log[-2000:]
    val = val_scalars(wd)[-1]
    for k in ('coco/bbox_mAP', 'coco/bbox_mAP_50', 'coco/segm_mAP', 'coco/segm_mAP_50'):
        assert 0.0 <= val[k] <= 1.0, (k, val)
    out = run_tool(['tools/test.py', cfg, wd / 'epoch_3.pth', '--work-dir', tmp_path / 'test',
                    '--out', tmp_path / 'preds.pkl', '--show-dir', 'vis'])
    log = out.stdout + out.stderr
    for k in ('coco/bbox_mAP', 'coco/segm_mAP', 'coco/bbox_mAP_50'):
        assert logged(log, k) == val[k], k
    # --out: mmdet's DumpDetResults (masks as RLE); --show-dir: under the run's folder
    preds = pickle.loads((tmp_path / 'preds.pkl').read_bytes())
    assert len(preds) == 2 and {'bboxes', 'scores', 'labels'} <= set(preds[0]['pred_instances'])
    masks = preds[0]['pred_instances'].get('masks', [])
    assert all(isinstance(m, dict) and 'counts' in m for m in masks)
    assert len(list((tmp_path / 'test').glob('*/vis/*.jpg'))) == 2


def test_upernet_two_cpu_processes(tmp_path, ade_root):
    cfg = write_cfg(tmp_path / 'upernet_tiny.py', TINY_UPERNET, data=ade_root, lr=1e-3, iters=4)
    wd = tmp_path / 'wd'
    out = run_tool(['bash', 'tools/dist_train.sh', cfg, '2', '--work-dir', wd], timeout=600)
    log = out.stdout + out.stderr
    assert 'Distributed launcher: pytorch' in log, log[-2000:]
    assert "sync_bn='torch' ignored" not in log  # CPU: tools/train.py keeps BN, in the list:
    assert "  sync_bn: 'torch' -> None (no CUDA: SyncBN needs it" in run_log(wd)
    assert (wd / 'iter_4.pth').exists()
    val = val_scalars(wd)[-1]
    assert 0.0 <= val['mIoU'] <= 100.0
