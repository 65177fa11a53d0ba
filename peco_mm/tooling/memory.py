"""Peak tensor memory of a piece of code on any device, and a linear model of it over batch size
(the memory planner of tools/benchmark.py).

On CUDA, `torch.cuda.max_memory_allocated` gives the peak of the caching allocator. The CPU
has no such counter, and the process's resident size mixes in libraries and freed-but-kept
pages, so `PeakMemory` counts tensors instead: a TorchDispatchMode that sees every tensor an
operator returns (forward, autograd's backward and the optimizer alike) and keeps the bytes of
the storages alive at each moment, the way the allocator's counter does. Workspace an operator
frees before it returns is not seen; that is the difference to expect against a GPU.

A training step peaks in one of three phases: at the end of the forward pass (weights,
optimizer state and the activations kept for backward, which grow with the batch), in the
backward pass (activations give way to gradients), or in the optimizer update (weights,
gradients, optimizer state and the update's temporaries, which do not grow with the batch).
`StepMemory` fits a line over batch size to each phase's peak and takes the largest: a line
through the step's overall peak would bend where the peak moves from one phase to another.
The backward peak itself is the larger of "activations + first gradients" and "all gradients";
measure at batches where the first dominates (`max_residual` shows a bend).
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
    """Peak memory of a training step over batch size B: the largest over phases of
    fixed[phase] + per_image[phase] * B, each line fitted by least squares to the peaks of
    that phase measured at a few batch sizes."""
    fixed: dict[str, float]  # phase -> bytes that do not grow with B (weights, state, ...)
    per_image: dict[str, float]  # phase -> bytes per image (activations, inputs)
    measured: dict[int, dict[str, float]]  # batch -> {phase: peak bytes}

    @classmethod
    def fit(cls, measured: dict[int, dict[str, float]]) -> 'StepMemory':
        if len(measured) < 2:
            raise ValueError(f'a line needs peaks at 2 or more batch sizes, got {list(measured)}')
        xs = list(measured)
        mx = sum(xs) / len(xs)
        fixed, per_image = {}, {}
        for phase in measured[xs[0]]:
            ys = [m[phase] for m in measured.values()]
            my = sum(ys) / len(ys)
            slope = (sum((x - mx) * (y - my) for x, y in zip(xs, ys))
                     / sum((x - mx) ** 2 for x in xs))
            fixed[phase], per_image[phase] = my - slope * mx, slope
        return cls(fixed, per_image, {b: dict(m) for b, m in measured.items()})

    def line(self, phase: str, batch: int) -> float:
        return self.fixed[phase] + self.per_image[phase] * batch

    def __call__(self, batch: int) -> float:
        return max(self.line(p, batch) for p in self.fixed)

    def phase_at(self, batch: int) -> str:
        """The phase whose line is highest at `batch`."""
        return max(self.fixed, key=lambda p: self.line(p, batch))

    def max_residual(self) -> float:
        """The largest |measured - fitted| over phases and batches, in bytes."""
        return max(abs(v - self.line(p, b)) for b, m in self.measured.items()
                   for p, v in m.items())


def model_state_tensors(module: torch.nn.Module) -> Sequence[torch.Tensor]:
    """Parameters and buffers of a module (what is on the device before the first step)."""
    return [*module.parameters(), *module.buffers()]
