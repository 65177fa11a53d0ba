"""Time one training step (forward + backward, batch 1) of the dense configs at full size.

    python tools/benchmark_dense.py                       # UperNet ViT-B 512x512, Mask R-CNN ViT-B
    python tools/benchmark_dense.py CONFIG [CONFIG ...] --steps 3 --device cuda

Weights are random (no pretrained file needed); inputs are synthetic: a 512x512 crop for
segmentation, an 800x1088 padded image (a 4:3 COCO photo at short side 800) with 3 objects
for detection. BN layers use running statistics (batch 1 has none for a 1x1 map). Prints
seconds per step (median after one warm-up step when --steps > 1) and the peak memory.
"""
import argparse
import os.path as osp
import resource
import statistics
import sys
import time

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

import torch  # noqa: E402
from mmengine.config import Config  # noqa: E402
from mmengine.model import revert_sync_batchnorm  # noqa: E402
from mmengine.registry import MODELS, init_default_scope  # noqa: E402

import peco_mm  # noqa: E402,F401

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DEFAULTS = ['configs/peco/upernet_vitb_ade20k.py', 'configs/peco/mask_rcnn_vitb_coco.py']


def seg_sample(hw=(512, 512), num_classes=150):
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    s = SegDataSample(metainfo=dict(img_shape=hw, ori_shape=hw, pad_shape=hw))
    s.gt_sem_seg = PixelData(data=torch.randint(0, num_classes, (1, *hw)))
    return s


def det_sample(hw=(800, 1088)):
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData
    s = DetDataSample(metainfo=dict(img_shape=hw, ori_shape=hw, pad_shape=hw,
                                    scale_factor=(1.0, 1.0), batch_input_shape=hw))
    boxes = torch.tensor([[40., 60., 400., 500.], [500., 100., 900., 700.],
                          [200., 550., 350., 780.]])
    masks = torch.zeros(len(boxes), *hw, dtype=torch.uint8)
    for m, (x0, y0, x1, y1) in zip(masks, boxes.int().tolist()):
        m[y0:y1, x0:x1] = 1
    s.gt_instances = InstanceData(bboxes=boxes, labels=torch.tensor([0, 2, 5]),
                                  masks=BitmapMasks(masks.numpy(), *hw))
    return s


def step_times(cfg_path: str, steps: int, device: str) -> tuple[list[float], int]:
    cfg = Config.fromfile(cfg_path if osp.isabs(cfg_path) else osp.join(ROOT, cfg_path))
    cfg.model.backbone.init_cfg = None
    init_default_scope(cfg.default_scope)
    model = revert_sync_batchnorm(MODELS.build(cfg.model)).to(device)
    model.init_weights()
    model.train()
    for m in model.modules():  # batch 1: UperNet's 1x1 pooling branch cannot train BN stats
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.eval()
    is_seg = cfg.default_scope == 'mmseg'
    sample = seg_sample() if is_seg else det_sample()
    hw = sample.metainfo['img_shape']
    data = dict(inputs=[torch.randint(0, 255, (3, *hw), dtype=torch.uint8)],
                data_samples=[sample])
    params = sum(p.numel() for p in model.parameters())
    times = []
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        if device == 'cuda':
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        batch = model.data_preprocessor(data, True)
        losses = model.loss(batch['inputs'], batch['data_samples'])
        loss, _ = model.parse_losses(losses)
        loss.backward()
        if device == 'cuda':
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return times, params


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('configs', nargs='*', default=DEFAULTS)
    p.add_argument('--steps', type=int, default=1)
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    args = p.parse_args(argv)
    print(f'torch {torch.__version__}, device {args.device}, {torch.get_num_threads()} threads')
    for c in args.configs:
        times, params = step_times(c, args.steps, args.device)
        t = statistics.median(times[1:] if len(times) > 1 else times)
        if args.device == 'cuda':
            peak = f'{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB GPU'
            torch.cuda.reset_peak_memory_stats()
        else:
            peak = f'{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.1f} GiB RSS'
        print(f'{osp.basename(c)}: {params / 1e6:.1f}M params, {t:.2f} s per step '
              f'(forward+backward, batch 1; steps: {", ".join(f"{x:.2f}" for x in times)}), '
              f'peak {peak}')


if __name__ == '__main__':
    main()
