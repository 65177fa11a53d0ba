"""The segmentation label check follows the model's number of classes: with a 2-class head a
label 2 stops the run naming the label file (instead of `Target 2 is out of bounds`)."""
import pytest

from tests.dense.conftest import TINY_UPERNET, write_cfg


# two classes on purpose (labels 0..2 must be refused); mmseg advises a 1-channel head for them
@pytest.mark.filterwarnings('ignore:For binary segmentation:UserWarning')
def test_label_check_takes_the_heads_classes(tmp_path, ade_root, isolated_mmengine,
                                             monkeypatch):
    from peco_mm.supervisor.launch import run
    # the pre-flight names the 2-class head against ADE20K's 150 classes first
    # (tests/engine/test_preflight.py); here the label check behind it, which sees the files
    monkeypatch.setenv('PECO_SKIP_PREFLIGHT', '1')
    cfg = write_cfg(tmp_path / 'upernet.py', TINY_UPERNET, data=ade_root, lr=1e-3, iters=2)
    opts = {'model.decode_head.num_classes': 2, 'model.auxiliary_head.num_classes': 2}
    with pytest.raises(RuntimeError) as err:  # the demo labels are 1..3 -> 0..2
        run(str(cfg), str(tmp_path / 'work'), opts)
    msg = str(err.value)
    seg = msg.split('(ValueError: ')[1].split(': ')[0]
    assert seg.startswith(str(ade_root / 'annotations' / 'training')) and seg.endswith('.png')
    assert 'label values [2] are outside the 2 classes (allowed: 0..1 and ignore_index=255' in msg


def test_label_check_classes_filled_in_or_refused():
    from mmengine.config import Config

    from peco_mm.datasets.seg_checks import CheckSegLabels
    from peco_mm.supervisor.seg_classes import set_label_check_classes
    check = dict(type='CheckSegLabels', ignore_index=255)
    cfg = Config(dict(model=dict(decode_head=dict(num_classes=7)),
                      train_dataloader=dict(dataset=dict(pipeline=[dict(type='X'), check])),
                      val_dataloader=dict(dataset=dict(type='ConcatDataset', datasets=[
                          dict(pipeline=[dict(check)])]))))
    set_label_check_classes(cfg)
    assert cfg.train_dataloader.dataset.pipeline[1].num_classes == 7
    assert cfg.val_dataloader.dataset.datasets[0].pipeline[0].num_classes == 7
    cfg.train_dataloader.dataset.pipeline[1].num_classes = 150
    with pytest.raises(ValueError, match=r'train_dataloader.dataset.pipeline.1.num_classes=150 '
                       r'but model.decode_head.num_classes=7'):
        set_label_check_classes(cfg)
    # left unset (a pipeline another tool builds): the range is not checked, negatives are
    unset = CheckSegLabels()
    assert unset(dict(gt_seg_map=[[0, 200]], ori_shape=(1, 2))) is not None
    with pytest.raises(ValueError, match=r'label values \[-1\]'):
        unset(dict(gt_seg_map=[[0, -1]], ori_shape=(1, 2)))


def test_label_check_passes_an_image_without_labels_and_names_a_misplaced_check():
    """mmseg's inference_model runs the test pipeline without LoadAnnotations: an image with no
    label file passes; one whose label file was not loaded yet is a misplaced check."""
    import numpy as np
    import pytest

    from peco_mm.datasets.seg_checks import CheckSegLabels
    check = CheckSegLabels(num_classes=3)
    image = dict(img=np.zeros((4, 6, 3), np.uint8), img_path='a.jpg', ori_shape=(4, 6))
    assert check(dict(image)) == image
    with pytest.raises(KeyError, match='CheckSegLabels needs `gt_seg_map`: put it after '
                                       'LoadAnnotations'):
        check(dict(image, seg_map_path='a.png'))
