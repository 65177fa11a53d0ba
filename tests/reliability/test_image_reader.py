"""The tools read images as training reads them: a 16-bit PNG (grey or RGB) gives the pixels
of its 8-bit copy, the same array mmcv's LoadImageFromFile gives, not a clipped white image."""
import warnings

import cv2
import numpy as np
import pytest
from PIL import Image


def ramp16(shape, seed=0):
    """uint16 image spanning the whole 16-bit range."""
    return np.random.default_rng(seed).integers(0, 65536, shape, dtype=np.uint16)


def training_read(path):
    from mmcv.transforms import LoadImageFromFile
    img = LoadImageFromFile()(dict(img_path=str(path)))['img']  # (H, W, 3) BGR
    return img[..., ::-1]


@pytest.mark.parametrize('channels', [1, 3], ids=['grey', 'rgb'])
def test_16bit_png_reads_as_training_does(tmp_path, channels):
    from peco_mm.tooling.images import read_rgb
    img16 = ramp16((32, 48) if channels == 1 else (32, 48, 3))
    path = tmp_path / 'img16.png'
    cv2.imwrite(str(path), img16 if channels == 1 else img16[..., ::-1])  # BGR on disk
    assert cv2.imread(str(path), cv2.IMREAD_UNCHANGED).dtype == np.uint16
    got = read_rgb(path)  # (32, 48, 3) uint8
    assert got.shape == (32, 48, 3) and got.dtype == np.uint8
    np.testing.assert_array_equal(got, training_read(path))
    eight = (img16 >> 8).astype(np.uint8)  # the 8-bit copy
    eight = np.repeat(eight[..., None], 3, axis=2) if channels == 1 else eight
    assert np.abs(got.astype(int) - eight).max() <= 1
    assert got.mean() < 160  # a uniform 0..65535 ramp averages 127.5, not near-white


def test_8bit_formats_unchanged(tmp_path):
    from peco_mm.tooling.images import read_rgb
    rgb = np.random.default_rng(1).integers(0, 256, (20, 30, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(tmp_path / 'rgb.png')
    Image.fromarray(rgb[..., 0]).save(tmp_path / 'grey.png')
    np.testing.assert_array_equal(read_rgb(tmp_path / 'rgb.png'), rgb)
    np.testing.assert_array_equal(read_rgb(tmp_path / 'grey.png'), np.repeat(rgb[..., :1], 3, 2))
    assert read_rgb(tmp_path / 'rgb.png', size=16).shape == (16, 16, 3)
    (tmp_path / 'bad.png').write_bytes(b'not an image')
    with pytest.raises(ValueError, match=r"cannot read image '.*bad.png'"):
        read_rgb(tmp_path / 'bad.png')


def test_normalize_read_only_array_does_not_warn():
    from peco_mm.tooling.images import normalize
    rgb = np.asarray(Image.fromarray(np.full((4, 4, 3), 255, np.uint8)))  # read-only
    assert not rgb.flags.writeable
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        x = normalize(rgb)
    assert x.shape == (3, 4, 4) and bool((x == 1).all())


def test_image_grid_layout_and_white_padding():
    """Rows of different lengths on white, `pad` pixels around and between the tiles."""
    from peco_mm.utils.image import image_grid
    a = np.stack([np.full((4, 5, 3), v, np.uint8) for v in (10, 20, 30)])  # (3, 4, 5, 3)
    b = np.stack([np.full((4, 5, 3), 40, np.uint8)])  # a row of one
    grid = image_grid([a, b], pad=2)
    assert grid.shape == (2 * (4 + 2) + 2, 3 * (5 + 2) + 2, 3) and grid.dtype == np.uint8
    for j, v in enumerate((10, 20, 30)):
        x = 2 + j * 7
        assert (grid[2:6, x:x + 5] == v).all()
    assert (grid[8:12, 2:7] == 40).all()
    assert (grid[8:12, 9:] == 255).all()  # the missing tiles and the padding are white
    assert (grid[:2] == 255).all() and (grid[6:8] == 255).all()


def test_find_images_is_recursive_sorted_and_case_blind(tmp_path):
    from peco_mm.tooling.images import find_images
    (tmp_path / 'b').mkdir()
    for name in ('b/x.PNG', 'a.jpg', 'notes.txt'):
        (tmp_path / name).write_bytes(b'')
    assert find_images(tmp_path) == [str(tmp_path / 'a.jpg'), str(tmp_path / 'b' / 'x.PNG')]
    (tmp_path / 'empty').mkdir()
    with pytest.raises(FileNotFoundError, match='no images'):
        find_images(tmp_path / 'empty')


def test_save_png_round_trip_and_nearest_upscale(tmp_path):
    from peco_mm.tooling.images import read_rgb, save_png
    rgb = np.zeros((2, 3, 3), np.uint8)
    rgb[0, 0] = (255, 0, 0)  # red stays red: the RGB order survives the write
    rgb[1, 2] = (0, 0, 255)
    path = save_png(rgb, tmp_path / 'deep' / 'x.png', scale=2)
    out = read_rgb(path)
    assert out.shape == (4, 6, 3)
    assert (out[:2, :2] == (255, 0, 0)).all() and (out[2:, 4:] == (0, 0, 255)).all()
    assert (out[:2, 2:4] == 0).all()
