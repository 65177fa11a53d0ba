"""Bad input for the dense tasks gives errors that name the file / key and what was expected:
label values outside the classes, a COCO JSON listing a missing image, a pretrained checkpoint
of another width, a missing dataset root. And the one-key pretrained loading that works."""

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope
from PIL import Image

import peco_mm  # noqa: F401
from peco_mm.datasets.seg_checks import CheckSegLabels
from peco_mm.supervisor.launch import check_dataset_paths, sync_with_model
from peco_mm.models import PeCoViT
from tests.dense.test_dense_models import CFG, build, tiny


def build_dataset(cfg: Config, loader: str, data_root):
    init_default_scope(cfg.default_scope)
    sync_with_model(cfg)  # as the launcher: the label check takes the head's classes
    from mmengine.registry import DATASETS
    ds = cfg[loader].dataset
    ds.data_root = str(data_root)
    return DATASETS.build(ds)


@pytest.mark.parametrize('loader', ['train_dataloader', 'val_dataloader'])
def test_label_outside_classes_names_the_file(ade_root, loader):
    bad = ade_root / 'annotations' / ('training' if loader.startswith('train') else 'validation')
    bad = sorted(bad.glob('*.png'))[1]
    label = np.array(Image.open(bad))
    label[0, :3] = 200  # ADE has 1..150 (0 = other, ignored)
    Image.fromarray(label).save(bad)
    ds = build_dataset(Config.fromfile(CFG / 'upernet_vitb_ade20k.py'), loader, ade_root)
    ds[0]  # a clean map passes
    with pytest.raises(ValueError, match=rf'{bad.name}: label values \[199\] are outside the '
                                         r'150 classes'):
        ds[1]


def test_label_check_keeps_ignore_index_and_rejects_negatives():
    check = CheckSegLabels(num_classes=3)
    ok = dict(gt_seg_map=np.array([[0, 1, 2, 255]]), seg_map_path='a.png')
    assert check(ok) is ok
    with pytest.raises(ValueError, match=r'b.png: label values \[-1, 3\]'):
        check(dict(gt_seg_map=np.array([[0, -1, 3, 255]]), seg_map_path='b.png'))
    with pytest.raises(ValueError, match='num_classes=0'):
        CheckSegLabels(num_classes=0)


def test_coco_json_with_missing_image_names_it(coco_root):
    (coco_root / 'train2017' / '000000000002.jpg').unlink()
    cfg = Config.fromfile(CFG / 'mask_rcnn_vitb_coco.py')
    with pytest.raises(FileNotFoundError, match=r'instances_train2017.json: 1 of 6 images it '
                                                r'lists are missing: .*000000000002.jpg'):
        build_dataset(cfg, 'train_dataloader', str(coco_root) + '/')
    # the val split is untouched and loads; the check can be switched off
    assert len(build_dataset(cfg, 'val_dataloader', str(coco_root) + '/')) == 2
    cfg.train_dataloader.dataset.check_images = False  # then, as mmdet: fails when read
    assert len(build_dataset(cfg, 'train_dataloader', str(coco_root) + '/')) == 6


def small_vit(width: int) -> PeCoViT:
    torch.manual_seed(3)
    return PeCoViT(arch=dict(embed_dims=width, num_layers=4, num_heads=2), img_size=32,
                   qkv_bias='qv', rel_pos_bias='shared', use_abs_pos_emb=False,
                   layer_scale_init_value=0.1, use_mask_token=True)


@pytest.mark.parametrize('cfg_name', ['upernet_vitb_ade20k.py', 'mask_rcnn_vitb_coco.py'])
def test_pretrained_of_another_width_names_both(tmp_path, cfg_name):
    ckpt = tmp_path / 'vit32.pth'
    torch.save({'state_dict': small_vit(32).state_dict()}, ckpt)
    cfg = tiny(cfg_name)
    cfg.model.backbone.init_cfg = dict(type='Pretrained', checkpoint=str(ckpt))
    with pytest.raises(ValueError, match=r'checkpoint width 32 .* embed_dims=64'):
        build(cfg)


def test_pretrained_one_key_loads_pretraining_and_converted_files(tmp_path):
    """A PeCo pretraining checkpoint ('backbone.*' + MIM head, shared rel-pos table at the
    pretraining grid) and a converted file (bare names) both load through init_cfg alone."""
    src = small_vit(64)
    sd = src.state_dict()
    whole = {'backbone.' + k: v for k, v in sd.items()}
    whole['head.weight'] = torch.zeros(8192, 64)
    torch.save({'state_dict': whole, 'meta': {}}, tmp_path / 'pretrain.pth')
    torch.save({'state_dict': sd}, tmp_path / 'converted.pth')
    for name in ('pretrain.pth', 'converted.pth'):
        cfg = tiny('upernet_vitb_ade20k.py')  # per-block tables at a 64 px (4x4) grid
        cfg.model.backbone.init_cfg = dict(type='Pretrained', checkpoint=str(tmp_path / name))
        model = build(cfg).backbone
        torch.testing.assert_close(model.blocks[2].mlp.fc1.weight, src.blocks[2].mlp.fc1.weight)
        torch.testing.assert_close(model.patch_embed.proj.weight, src.patch_embed.proj.weight)
        # the shared 2x2-grid table was expanded to every block and resized 2x2 -> 4x4
        table = model.blocks[3].rel_pos_bias.relative_position_bias_table
        assert table.shape == ((2 * 4 - 1) ** 2 + 3, 2)
        torch.testing.assert_close(table[-3:], src.rel_pos_bias.relative_position_bias_table[-3:])


@pytest.mark.parametrize('cfg_name,layout', [
    ('upernet_vitb_ade20k.py', 'annotations/'),
    ('mask_rcnn_vitb_coco.py', 'instances_')])
def test_missing_dataset_names_path_and_layout(tmp_path, cfg_name, layout):
    cfg = Config.fromfile(CFG / cfg_name)
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        cfg[loader].dataset.data_root = str(tmp_path / 'nowhere')
    with pytest.raises(FileNotFoundError, match='nowhere') as err:
        check_dataset_paths(cfg)
    assert layout in str(err.value)


def test_label_check_lets_an_image_without_labels_through_and_names_a_misordered_one():
    """mmseg's `inference_model` runs the test pipeline without LoadAnnotations (it drops
    that step), so the check sees an image with no label file: it goes through. A sample whose
    label file was not loaded yet (the check before LoadAnnotations) is still an error."""
    check = CheckSegLabels(num_classes=3)
    image = dict(img=np.zeros((4, 6, 3), np.uint8), img_path='demo.jpg', ori_shape=(4, 6))
    assert check(image) is image
    with pytest.raises(KeyError, match='put it after LoadAnnotations'):
        check(dict(image, seg_map_path='a.png'))
