"""Record what mmcv's compiled ops compute, for the parity tests of peco_mm's torchvision-backed
``mmcv._ext`` (tests/ops).

    python tools/record_mmcv_ops_fixture.py [--out tests/ops/data/mmcv_ops_2.1.0.pt]

Run it in an environment whose mmcv has its compiled ops (``bash tools/install.sh --mmcv-ops``);
it refuses to record the shim against itself. The fixture holds the inputs (made here from a
fixed seed) and mmcv's outputs:

- RoIAlign forward and backward through ``mmcv.ops.roi_align``: ``aligned`` True and False,
  ``sampling_ratio`` 0 (adaptive) and 2, spatial scales 1, 1/2 and 1/4, boxes that cross the
  border, lie outside it or are smaller than a pixel, and an empty RoI set;
- ``mmcv.ops.nms``: three IoU thresholds, tied scores and duplicate boxes, ``offset=1`` on
  integer and on fractional coordinates, score threshold and ``max_num``, no boxes;
- ``mmcv.ops.batched_nms``: the class-offset path, the per-class path (``split_thr``), class
  agnostic, and no boxes.

The tests replay each case with :func:`run_case` on the shim and compare.
"""
import argparse
import os.path as osp
import sys
sys.path.append(osp.dirname(osp.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DEFAULT_OUT = osp.join(ROOT, 'tests', 'ops', 'data', 'mmcv_ops_2.1.0.pt')


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog='examples:\n  tools/record_mmcv_ops_fixture.py    # in an environment with '
               'the compiled mmcv 2.1.0\n  tools/record_mmcv_ops_fixture.py --out /tmp/ops.pt')
    parser.add_argument('--out', default=DEFAULT_OUT, help='fixture file to write')
    return parser.parse_args(argv)


if __name__ == '__main__':
    ARGS = parse_args()  # --help answers before torch is imported

import torch  # noqa: E402
FEATURE_SHAPE = (2, 3, 10, 12)  # (B, C, H, W)
OUTPUT_SIZE = (3, 4)  # (h, w): not square, so a swapped axis shows


def random_rois(gen: torch.Generator, num: int, spatial_scale: float) -> torch.Tensor:
    """(num, 5) rois ``batch, x1, y1, x2, y2`` in image pixels (feature size / spatial_scale),
    some crossing the border, some outside it, some under a pixel wide."""
    batch, _, height, width = FEATURE_SHAPE
    img_w, img_h = width / spatial_scale, height / spatial_scale
    x1 = torch.rand(num, generator=gen) * (img_w + 4) - 3
    y1 = torch.rand(num, generator=gen) * (img_h + 4) - 3
    bw = torch.rand(num, generator=gen) * img_w * 0.6
    bh = torch.rand(num, generator=gen) * img_h * 0.6
    bw[:2] = bw[:2] * 0.05  # smaller than a pixel
    idx = torch.randint(batch, (num, ), generator=gen).float()
    return torch.stack([idx, x1, y1, x1 + bw, y1 + bh], dim=1)


def roi_align_cases(gen: torch.Generator) -> list:
    feats = torch.randn(FEATURE_SHAPE, generator=gen)
    cases = []
    for spatial_scale in (1.0, 0.5, 0.25):
        rois = random_rois(gen, 12, spatial_scale)
        for aligned in (True, False):
            for sampling_ratio in (0, 2):
                cases.append(dict(op='roi_align', feats=feats, rois=rois,
                                  grad_out=torch.randn((12, 3) + OUTPUT_SIZE, generator=gen),
                                  spatial_scale=spatial_scale, aligned=aligned,
                                  sampling_ratio=sampling_ratio))
    for aligned in (True, False):
        cases.append(dict(op='roi_align', feats=feats, rois=torch.zeros(0, 5),
                          grad_out=torch.zeros((0, 3) + OUTPUT_SIZE), spatial_scale=0.5,
                          aligned=aligned, sampling_ratio=0))
    return cases


def random_boxes(gen: torch.Generator, num: int, size: float = 40.) -> torch.Tensor:
    """(num, 4) boxes ``x1, y1, x2, y2`` crowded into a (size, size) image, so many overlap."""
    xy = torch.rand(num, 2, generator=gen) * size
    wh = torch.rand(num, 2, generator=gen) * size / 2 + 1
    return torch.cat([xy, xy + wh], dim=1)


def nms_cases(gen: torch.Generator) -> list:
    boxes, scores = random_boxes(gen, 60), torch.rand(60, generator=gen)
    cases = [dict(op='nms', boxes=boxes, scores=scores, iou_threshold=thr, offset=0,
                  score_threshold=0., max_num=-1) for thr in (0.3, 0.5, 0.7)]
    # ties: scores on 4 levels, and every box also present a second time with its score
    tied_boxes = torch.cat([boxes[:30], boxes[:30]])
    tied_scores = torch.cat([(scores[:30] * 4).floor() / 4] * 2)
    cases.append(dict(op='nms', boxes=tied_boxes, scores=tied_scores, iou_threshold=0.5,
                      offset=0, score_threshold=0., max_num=-1))
    cases.append(dict(op='nms', boxes=boxes.round(), scores=scores, iou_threshold=0.5,
                      offset=1, score_threshold=0., max_num=-1))
    cases.append(dict(op='nms', boxes=boxes, scores=scores, iou_threshold=0.5, offset=1,
                      score_threshold=0., max_num=-1))
    cases.append(dict(op='nms', boxes=boxes, scores=scores, iou_threshold=0.6, offset=0,
                      score_threshold=0.3, max_num=10))
    cases.append(dict(op='nms', boxes=torch.zeros(0, 4), scores=torch.zeros(0),
                      iou_threshold=0.5, offset=0, score_threshold=0., max_num=-1))
    return cases


def batched_nms_cases(gen: torch.Generator) -> list:
    boxes, scores = random_boxes(gen, 80), torch.rand(80, generator=gen)
    idxs = torch.randint(4, (80, ), generator=gen)
    base = dict(op='batched_nms', boxes=boxes, scores=scores, idxs=idxs)
    cases = [
        dict(base, nms_cfg=dict(type='nms', iou_threshold=0.5)),  # class offsets
        dict(base, nms_cfg=dict(type='nms', iou_threshold=0.5, split_thr=10)),  # per class
        dict(base, nms_cfg=dict(type='nms', iou_threshold=0.5, class_agnostic=True)),
        dict(base, nms_cfg=dict(type='nms', iou_threshold=0.7, max_num=15)),
    ]
    tied = (scores * 4).floor() / 4
    cases.append(dict(base, scores=tied, nms_cfg=dict(type='nms', iou_threshold=0.5)))
    return cases


def run_case(case: dict) -> dict:
    """The outputs of ``mmcv.ops`` for one case, with whatever ``mmcv._ext`` mmcv.ops holds."""
    from mmcv.ops import batched_nms, nms, roi_align
    if case['op'] == 'roi_align':
        feats = case['feats'].clone().requires_grad_(True)
        out = roi_align(feats, case['rois'], OUTPUT_SIZE, case['spatial_scale'],
                        case['sampling_ratio'], 'avg', case['aligned'])
        out.backward(case['grad_out'])
        return dict(out=out.detach(), grad=feats.grad)
    if case['op'] == 'nms':
        dets, keep = nms(case['boxes'], case['scores'], case['iou_threshold'], case['offset'],
                         case['score_threshold'], case['max_num'])
        return dict(dets=dets, keep=keep)
    dets, keep = batched_nms(case['boxes'], case['scores'], case['idxs'], dict(case['nms_cfg']))
    return dict(dets=dets, keep=keep)


def main(args: argparse.Namespace) -> None:
    import mmcv
    import mmcv._ext
    import torchvision
    if not mmcv._ext.__file__.endswith('.so'):
        raise SystemExit(f'mmcv._ext is {mmcv._ext.__file__}, not the compiled ops: run this '
                         'in an environment installed with `bash tools/install.sh --mmcv-ops`')
    gen = torch.Generator().manual_seed(0)
    cases = roi_align_cases(gen) + nms_cases(gen) + batched_nms_cases(gen)
    for case in cases:
        case['expected'] = run_case(case)
    meta = dict(mmcv=mmcv.__version__, torch=str(torch.__version__),
                torchvision=str(torchvision.__version__), ext=osp.basename(mmcv._ext.__file__))
    torch.save(dict(meta=meta, cases=cases), args.out)
    print(f'{len(cases)} cases from {meta} -> {args.out} ({osp.getsize(args.out)} bytes)')


if __name__ == '__main__':
    main(ARGS)
