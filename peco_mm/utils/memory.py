"""Peak tensor memory of a piece of code on any device, and a linear model of it over batch size
(the memory planner of tools/benchmark.py).

On CUDA, `torch.cuda.max_memory_allocated` gives the peak of the caching allocator. The CPU
has no such counter, and the process's resident size mixes in libraries and freed-but-kept
pages, so `PeakMemory` counts tensors instead: a TorchDispatchMode that sees every tensor an
operator returns (forward, autograd's backward and the optimizer alike) and keeps the bytes of
the storages alive at each moment, the way the allocator's counter does. Workspace an operator
frees before it returns is not seen; that is the difference to expect against a GPU.

A training step has two peaks: in the backward pass (weights, gradients, optimizer state and
the activations, which grow with the batch) and in the optimizer update (weights, gradients,
optimizer state and the update's temporaries, which do not). At small batches the second can
be the larger, so `StepMemory` fits a line to the first over batch size and keeps the second
as a floor, rather than fitting a line to the maximum of both.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class PeakMemory(TorchDispatchMode):
    """Count the bytes of live tensor storages while active; `peak` is the largest total.

    Tensors made before entering (parameters, a data batch) count when passed to `track`;
    tensors made inside are found on every operator's outputs. A storage counts once, however
    many views share it, and stops counting when it is freed.

    Example:
        >>> with PeakMemory() as mem:
        ...     mem.track(model.parameters())
        ...     model(x).sum().backward()
        >>> mem.peak  # bytes
    """

    def __init__(self) -> None:
        super().__init__()
        self.current = 0
        self.peak = 0
        self.phases: dict[str, int] = {}  # name -> peak bytes within that phase
        self._phase_peak = 0
        self._live: dict[int, tuple[weakref.ref, int]] = {}  # data_ptr -> (ref, bytes)

    def mark(self, phase: str) -> None:
        """End a phase: its peak (the largest total since the previous mark) is kept as
        `phases[phase]` (the largest over repeats of that phase)."""
        self.phases[phase] = max(self.phases.get(phase, 0), self._phase_peak)
        self._phase_peak = self.current

    def track(self, tensors: Iterable[torch.Tensor]) -> None:
        """Count tensors that exist already (model state, inputs)."""
        for t in tensors:
            self._add(t)

    def _add(self, t: torch.Tensor) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type == 'meta':
            return
        st = t.untyped_storage()
        ptr, nbytes = st.data_ptr(), st.nbytes()
        if nbytes == 0 or ptr in self._live:
            return

        def freed(_ref, ptr=ptr, nbytes=nbytes):
            if self._live.pop(ptr, None) is not None:
                self.current -= nbytes

        self._live[ptr] = (weakref.ref(st, freed), nbytes)
        self.current += nbytes
        self.peak = max(self.peak, self.current)
        self._phase_peak = max(self._phase_peak, self.current)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            self._add(t)
        return out


@dataclass
class StepMemory:
    """Peak memory of a training step over batch size B:
    max(fixed + per_image * B, update), where the line is fitted by least squares to the
    forward/backward peaks measured at a few batch sizes and `update` is the largest peak of
    the optimizer update (which does not depend on B)."""
    fixed: float  # bytes: weights, optimizer state, the gradients present at that peak
    per_image: float  # bytes per image: activations kept for backward, inputs
    update: float  # bytes: the optimizer update's peak
    measured: dict[int, dict[str, float]]  # batch -> {phase: peak bytes}

    @classmethod
    def fit(cls, measured: dict[int, dict[str, float]],
            line_phase: str = 'forward_backward', flat_phase: str = 'optimizer') -> 'StepMemory':
        if len(measured) < 2:
            raise ValueError(f'a line needs peaks at 2 or more batch sizes, got {list(measured)}')
        xs = list(measured)
        ys = [m[line_phase] for m in measured.values()]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = (sum((x - mx) * (y - my) for x, y in zip(xs, ys))
                 / sum((x - mx) ** 2 for x in xs))
        update = max(m.get(flat_phase, 0.0) for m in measured.values())
        return cls(fixed=my - slope * mx, per_image=slope, update=update,
                   measured={b: dict(m) for b, m in measured.items()})

    def line(self, batch: int) -> float:
        return self.fixed + self.per_image * batch

    def __call__(self, batch: int) -> float:
        return max(self.line(batch), self.update)

    def max_residual(self, line_phase: str = 'forward_backward') -> float:
        """The largest |measured - fitted| of the line, in bytes: how far from linear."""
        return max(abs(m[line_phase] - self.line(b)) for b, m in self.measured.items())


def model_state_tensors(module: torch.nn.Module) -> Sequence[torch.Tensor]:
    """Parameters and buffers of a module (what is on the device before the first step)."""
    return [*module.parameters(), *module.buffers()]
