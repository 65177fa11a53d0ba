"""The run's test-time preprocessing, as an export's image processor and model card state it:
the data preprocessor's mean and std, and the resize and centre crop of the pipeline the run
tested with (its test dataloader's, else its val dataloader's, else the top-level
`test_pipeline`). Everything is read from the stored config as plain data and checked; what
is not usable is refused naming the key."""
from __future__ import annotations

import math
from numbers import Real

# what PeCo's ViT sees unless the run says otherwise (configs/_base_/models/peco_vit_b.py)
from ...utils.image import IMAGENET_MEAN, IMAGENET_STD


# where a run's test pipeline can be, in the order the export trusts them
PIPELINE_KEYS = ('test_dataloader', 'val_dataloader', 'test_pipeline')
# The transformers processor that resizes the short side and centre-crops as the run does.
# mmcv's CenterCrop starts at round((side - crop) / 2), half to even (59.5 -> 60); the slow
# processors (BitImageProcessor, CLIPImageProcessor) floor it (59), 1 px off whenever
# side - crop is 3 mod 4, which no setting changes. The fast one crops with torchvision's
# center_crop, which rounds as mmcv does; it resizes uint8 with torch's antialiased kernel,
# whose rounding differs from PIL's by a level or two on some pixels (PIL rounds to 8 bits
# between its horizontal and vertical passes). transformers before 4.48 has no such class and
# falls back to the model type's BeitImageProcessor, which cannot resize the short side.
HF_PROCESSOR = 'CLIPImageProcessorFast'
HF_PROCESSOR_NOTE = (
    "transformers' slow image processors centre-crop at floor((side - crop) / 2) where the "
    "run's CenterCrop rounds half to even (1 px off whenever side - crop is 3 mod 4): "
    f'preprocessor_config.json names {HF_PROCESSOR} (transformers 4.48 or later, with '
    "torchvision), whose crop rounds as the run does and whose resize differs from PIL's by "
    'rounding (a level or two on some pixels); use_fast=False or no torchvision gives the slow '
    'one')
# mmcv's Pillow interpolation names -> PIL resample codes (timm and transformers take them)
PIL_RESAMPLE = dict(nearest=0, lanczos=1, bilinear=2, bicubic=3, box=4, hamming=5)
# mmcv's OpenCV interpolation names -> the PIL filter closest to each (area: box, shrinking)
CV2_AS_PIL = dict(nearest='nearest', bilinear='bilinear', bicubic='bicubic', area='box',
                  lanczos='lanczos')


def data_config(src) -> dict:
    """Normalisation and test-time resize of the run (its data preprocessor and test pipeline)
    of an `ExportSource`, falling back to PeCo's ImageNet statistics and a resize to the
    model's input size."""
    return read_preprocessing(src.run.get('cfg') or {}, src.kwargs['img_size'],
                              src.run.get('source'))[0]


def read_preprocessing(cfg: dict, img_size, path: str | None = None
                       ) -> tuple[dict, list[str]]:
    """(mean01, std01, resize, crop (h, w), interpolation, resample, crop_pct of the run;
    notes on what the export could not follow). Raises ValueError naming the stored key that
    holds no usable value."""
    where = f'{path or "checkpoint"} meta.cfg'
    mean, std = read_normalisation(cfg, where)
    img = _hw(img_size)
    pipelines = find_test_pipelines(cfg, where)
    resize, crop, interpolation, notes = min(img), img, 'bicubic', []
    if pipelines:
        key, pipeline = pipelines[0]
        resize, crop, interpolation, notes = read_resize_and_crop(pipeline, key, where,
                                                                  min(img), img)
        for other_key, other in pipelines[1:]:
            if other_key == 'test_pipeline' and \
                    read_resize_and_crop(other, other_key, where, min(img), img)[:2] != \
                    (resize, crop):
                notes.append(f'the top-level test_pipeline resizes or crops differently from '
                             f'{key}; the export follows {key}, which the run tested with '
                             f'(resize {resize}, crop {"x".join(map(str, crop))})')
    return dict(mean01=[round(float(m) / 255, 6) for m in mean],
                std01=[round(float(s) / 255, 6) for s in std], resize=resize, crop=crop,
                interpolation=interpolation, resample=PIL_RESAMPLE[interpolation],
                crop_pct=timm_crop_pct(crop, resize) or timm_crop_pct((min(crop),), resize)
                ), notes


def timm_crop_pct(crop: tuple[int, ...], resize: int) -> float | None:
    """The `crop_pct` with the fewest decimals for which timm's eval transform resizes the
    short side to `resize` before cropping each side of `crop`: timm scales to
    `math.floor(side / crop_pct)`, so `crop / resize` rounded (32 / 36 -> 0.8889 gives 35) is
    not enough. None when no single value fits every side (a non-square crop far from
    square), which timm then resizes by `ResizeKeepRatio`, not by the short side."""
    high = min(side / resize for side in crop)  # floor(side / crop_pct) >= resize
    for digits in range(1, 18):
        for pct in (round(high, digits), math.floor(high * 10 ** digits) / 10 ** digits):
            if pct > 0 and all(math.floor(side / pct) == resize for side in crop):
                return pct
    return None


def read_normalisation(cfg: dict, where: str) -> tuple[list, list]:
    """The data preprocessor's mean and std (RGB, 0..255), checked: three numbers each, every
    std above zero."""
    model = cfg.get('model') if isinstance(cfg.get('model'), dict) else {}
    key = 'data_preprocessor' if cfg.get('data_preprocessor') else 'model.data_preprocessor'
    pre = cfg.get('data_preprocessor') or model.get('data_preprocessor') or {}
    if not isinstance(pre, dict):
        raise ValueError(f'{where}: {key} is {type(pre).__name__}, expected a dict')
    values = {}
    for name, default in (('mean', IMAGENET_MEAN), ('std', IMAGENET_STD)):
        value = pre.get(name, default)
        if not isinstance(value, (list, tuple)) or len(value) not in (1, 3) or not all(
                isinstance(v, Real) and not isinstance(v, bool) for v in value):
            raise ValueError(f'{where}: {key}.{name}={value!r}, expected 3 numbers (RGB)')
        values[name] = list(value) * (3 // len(value))
    if any(s <= 0 for s in values['std']):
        raise ValueError(f'{where}: {key}.std={values["std"]} has a value at or below zero; '
                         'normalising divides by it, so the export would hold no usable '
                         'preprocessing')
    if not pre.get('to_rgb', True) and 'mean' in pre:
        return values['mean'][::-1], values['std'][::-1]  # BGR statistics on BGR input
    return values['mean'], values['std']


def find_test_pipelines(cfg: dict, where: str) -> list[tuple[str, list]]:
    """(key, pipeline) of each place in PIPELINE_KEYS that holds one, in that order."""
    found = []
    for key in PIPELINE_KEYS:
        name, node = key, cfg.get(key)
        if key != 'test_pipeline':
            name, node = _dataset_pipeline(node, key)
        if node is None:
            continue
        if not isinstance(node, (list, tuple)):
            raise ValueError(f'{where}: {name} is {type(node).__name__}, expected a list of '
                             'transforms')
        found.append((name, list(node)))
    return found


def _dataset_pipeline(loader, key: str) -> tuple[str, object]:
    """A data loader's dataset pipeline, through dataset wrappers (`dataset.dataset...`)."""
    name, node = key, loader
    while isinstance(node, dict):
        if 'pipeline' in node:
            return f'{name}.pipeline', node['pipeline']
        name, node = f'{name}.dataset', node.get('dataset')
    return name, None


def read_resize_and_crop(pipeline: list, key: str, where: str, resize: int,
                         crop: tuple[int, int]) -> tuple[int, tuple[int, int], str, list[str]]:
    """The short-side resize (`ResizeEdge`: size and interpolation) and centre crop
    (`CenterCrop`, its crop_size read as mmcv's (w, h)) of a pipeline, checked; other resizing
    or cropping steps are named in the notes (the processor cannot follow them)."""
    notes, interpolation = [], 'bicubic'
    for i, t in enumerate(pipeline):
        if not isinstance(t, dict) or not isinstance(t.get('type'), str):
            raise ValueError(f'{where}: {key}[{i}] is {t!r}, expected dict(type=..., ...)')
        kind = t['type'].rsplit('.', 1)[-1]
        if kind == 'ResizeEdge' and t.get('edge', 'short') == 'short':
            resize = min(_pixels(t.get('scale'), f'{key}[{i}] ResizeEdge scale', where))
            interpolation = read_interpolation(t, f'{key}[{i}] ResizeEdge', where, notes)
        elif kind == 'CenterCrop':
            w, h = _pixels(t.get('crop_size'), f'{key}[{i}] CenterCrop crop_size', where)
            crop = (h, w)
        elif 'Resize' in kind or 'Crop' in kind:
            notes.append(f'{key}[{i}] {kind} is not carried into the exported preprocessing '
                         '(the exported processor resizes the short side, then centre-crops)')
    return resize, crop, interpolation, notes


def read_interpolation(t: dict, what: str, where: str, notes: list[str]) -> str:
    """The PIL filter (a `PIL_RESAMPLE` name) that reproduces a ResizeEdge's resampling: its
    own with backend='pillow'; the closest one to OpenCV's (mmcv's default backend), noted."""
    backend, name = t.get('backend', 'cv2'), t.get('interpolation', 'bilinear')
    allowed = PIL_RESAMPLE if backend == 'pillow' else CV2_AS_PIL
    if backend not in ('pillow', 'cv2') or name not in allowed:
        raise ValueError(f'{where}: {what} backend={backend!r} interpolation={name!r}, '
                         f"expected backend 'pillow' with one of {sorted(PIL_RESAMPLE)} or "
                         f"'cv2' with one of {sorted(CV2_AS_PIL)}")
    if backend == 'pillow':
        return name
    notes.append(f"{what} resizes with OpenCV ({name}); the exported preprocessing resizes "
                 f"with PIL's {CV2_AS_PIL[name]}, whose pixels differ where the image shrinks "
                 "(PIL antialiases, OpenCV's bilinear and bicubic do not)")
    return CV2_AS_PIL[name]


def _pixels(value, what: str, where: str) -> tuple[int, int]:
    """A positive size in pixels, one number or (h, w)."""
    pair = value if isinstance(value, (list, tuple)) and len(value) == 2 else (value, value)
    if not all(isinstance(v, Real) and not isinstance(v, bool) and v > 0 for v in pair):
        raise ValueError(f'{where}: {what}={value!r}, expected a positive number of pixels '
                         'or a pair of them')
    return int(pair[0]), int(pair[1])


def _hw(size) -> tuple[int, int]:
    return (int(size), int(size)) if isinstance(size, (int, float)) else \
        (int(size[0]), int(size[1]))
