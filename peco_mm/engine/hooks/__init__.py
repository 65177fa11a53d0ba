"""Training hooks: codebook health, reconstruction visualisation, and the safeguard hooks the
launcher adds to every run (atomic checkpoints, a non-finite loss guard, resume and load_from
checks, the model's arguments stored as plain data; `peco_mm.supervisor.safeguards`)."""
from .arch_meta import ArchitectureMetaHook
from .checkpoint import AtomicCheckpointHook
from .codebook_health import CodebookHealthHook, find_quantizer
from .load_check import LoadFromCheckHook
from .nonfinite import NonFiniteLossHook
from .reconstruction_vis import ReconstructionVisHook
from .resume_check import ResumeCheckHook

__all__ = ['ArchitectureMetaHook', 'AtomicCheckpointHook', 'CodebookHealthHook',
           'LoadFromCheckHook', 'NonFiniteLossHook', 'ReconstructionVisHook', 'ResumeCheckHook',
           'find_quantizer']
