"""A stand-in for mmcv 2.1's compiled ``mmcv._ext``, on torchvision's compiled ops.

mmcv-lite is mmcv without its C++/CUDA extension ``mmcv._ext``; ``mmcv.ops`` still asks that
module, at import time, for the function of every op by name. This module answers every name:

- ``nms``, ``roi_align_forward`` and ``roi_align_backward`` run torchvision's kernels (CPU and
  CUDA), which compute what mmcv's kernels compute: the parity tests compare them with outputs
  recorded from the compiled mmcv 2.1.0 (``tests/ops``). They are the only compiled ops that
  Mask R-CNN, Cascade Mask R-CNN (RoIAlign, ``nms`` / ``batched_nms``, mask cropping), UperNet,
  FPN and mmpretrain use.
- Every other op (deformable convolution, MultiScaleDeformableAttention, ...) raises a one-line
  ``NotImplementedError`` naming the op and the full build, when it is called.

``ext_finder.py`` imports this file as ``mmcv._ext`` where no compiled one is installed.
"""
import torch
import torchvision

FULL_BUILD = ('bash tools/install.sh --mmcv-ops (or PECO_MMCV_OPS=1 make install), which '
              "builds mmcv's compiled ops")


def nms(bboxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float,
        offset: int = 0) -> torch.Tensor:
    """Indices of the kept boxes among ``bboxes`` (N, 4) ``x1, y1, x2, y2``, by decreasing
    score; of boxes with equal scores, the one mmcv keeps.

    ``offset=1`` (mmcv's legacy ``width = x2 - x1 + 1``) is the same suppression on boxes whose
    ``x2, y2`` are one larger; it equals mmcv's arithmetic exactly on integer coordinates.
    """
    if offset not in (0, 1):
        raise ValueError(f'nms: offset must be 0 or 1, got {offset}')
    if offset:
        bboxes = bboxes + bboxes.new_tensor([0, 0, 1, 1])
    # mmcv's kernels visit the boxes in the order of scores.sort(descending=True), which is not
    # stable; torchvision's sort is. Visiting them in mmcv's order breaks ties as mmcv does.
    order = scores.sort(0, descending=True)[1]  # (N, )
    return order[torch.ops.torchvision.nms(bboxes[order], scores[order], float(iou_threshold))]


def _check_avg_pool(pool_mode: int) -> None:
    # mmcv codes pool_mode as 0 = max, 1 = avg; torchvision has only the average
    if pool_mode != 1:
        raise NotImplementedError(
            "mmcv op 'roi_align' with pool_mode='max' is not available without mmcv's compiled "
            f"ops (torchvision averages only); use pool_mode='avg' or run {FULL_BUILD}")


def roi_align_forward(input: torch.Tensor, rois: torch.Tensor, output: torch.Tensor,
                      argmax_y: torch.Tensor, argmax_x: torch.Tensor, aligned_height: int,
                      aligned_width: int, spatial_scale: float, sampling_ratio: int,
                      pool_mode: int, aligned: bool) -> None:
    """Writes RoIAlign of ``input`` (B, C, H, W) over ``rois`` (K, 5) into ``output``
    (K, C, aligned_height, aligned_width), as mmcv's kernel does."""
    _check_avg_pool(pool_mode)
    dtype = _kernel_dtype(input)
    output.copy_(torch.ops.torchvision.roi_align(input.to(dtype), rois.to(dtype), spatial_scale,
                                                 aligned_height, aligned_width, sampling_ratio,
                                                 aligned))


def roi_align_backward(grad_output: torch.Tensor, rois: torch.Tensor, argmax_y: torch.Tensor,
                       argmax_x: torch.Tensor, grad_input: torch.Tensor, aligned_height: int,
                       aligned_width: int, spatial_scale: float, sampling_ratio: int,
                       pool_mode: int, aligned: bool) -> None:
    """Adds the gradient of ``roi_align_forward`` for ``grad_output`` (K, C, h, w) into
    ``grad_input`` (B, C, H, W), as mmcv's kernel does."""
    _check_avg_pool(pool_mode)
    batch, channels, height, width = grad_input.shape
    dtype = _kernel_dtype(grad_output)
    grad_input.add_(torch.ops.torchvision._roi_align_backward(
        grad_output.to(dtype), rois.to(dtype), spatial_scale, aligned_height, aligned_width,
        batch, channels, height, width, sampling_ratio, aligned))


def _kernel_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype torchvision's RoIAlign kernels compute `t` in: bf16 (from an autocast region,
    or its backward) in fp32, as they have no bf16 kernel; the result is stored in the
    caller's dtype."""
    return torch.float32 if t.dtype == torch.bfloat16 else t.dtype


def get_compiler_version() -> str:
    return f'none: torchvision {torchvision.__version__} ops (peco_mm.ops)'


def get_compiling_cuda_version() -> str:
    return torch.version.cuda or 'not available'


def unavailable_op(name: str):
    """The function standing in for mmcv op ``name``: it raises when called."""

    def op(*args, **kwargs):
        raise NotImplementedError(
            f"mmcv op '{name}' is not available: this environment has mmcv-lite with "
            f'torchvision-backed nms and roi_align only; run {FULL_BUILD}')

    op.__name__ = name
    return op


def __getattr__(name: str):
    # mmcv.ops checks hasattr(mmcv._ext, op) for every op at import time; private and dunder
    # names stay missing, so the import machinery does not take this module for a package
    if name.startswith('_'):
        raise AttributeError(f"module 'mmcv._ext' has no attribute '{name}'")
    return unavailable_op(name)
