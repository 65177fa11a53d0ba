"""Periodic reconstructions during tokenizer training, written through mmengine's visualizer
(vis_data/ of the work dir, or TensorBoard / W&B when those backends are configured): a grid
with the originals on the top row and their reconstructions below."""
from __future__ import annotations

import torch
from mmengine.dist import is_main_process
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from ...registry import HOOKS


@HOOKS.register_module()
class ReconstructionVisHook(Hook):
    """Every `interval` iterations, reconstruct the first `num_images` images of the batch.

    Args:
        interval: iterations between grids.
        num_images: images per grid.
        name: the visualizer's image name.
    """
    priority = 'LOW'

    def __init__(self, interval: int = 1000, num_images: int = 8,
                 name: str = 'reconstruction') -> None:
        if interval < 1 or num_images < 1:
            raise ValueError(f'interval={interval} and num_images={num_images} must be >= 1')
        self.interval = interval
        self.num_images = num_images
        self.name = name

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if not self.every_n_train_iters(runner, self.interval) or data_batch is None:
            return
        if not is_main_process():
            return
        from ...utils.image import side_by_side_grid
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        if getattr(model, 'decoder', None) is None:
            return
        data = model.data_preprocessor(data_batch, False)
        img = data['inputs'][:self.num_images]
        with torch.no_grad():  # no EMA update without gradients
            recon, _, _ = model.reconstruct(img)
        grid = side_by_side_grid(img, recon)  # (H, W, 3) uint8
        runner.visualizer.add_image(self.name, grid, step=runner.iter + 1)
