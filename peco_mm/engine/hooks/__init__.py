"""Training hooks: codebook health, reconstruction visualisation, and the safeguards every
run gets (atomic checkpoints, a non-finite loss guard, a resume check, the model's
arguments stored as plain data)."""
from .arch_meta import ArchitectureMetaHook
from .checkpoint import AtomicCheckpointHook, find_resumable_checkpoint
from .codebook_health import CodebookHealthHook, find_quantizer
from .load_check import LoadFromCheckHook
from .nonfinite import NonFiniteLossHook
from .reconstruction_vis import ReconstructionVisHook
from .resume_check import ResumeCheckHook
from .safeguards import add_safeguards, guard_train_data

__all__ = ['ArchitectureMetaHook', 'AtomicCheckpointHook', 'CodebookHealthHook',
           'LoadFromCheckHook', 'NonFiniteLossHook', 'ReconstructionVisHook', 'ResumeCheckHook',
           'add_safeguards', 'find_quantizer', 'find_resumable_checkpoint', 'guard_train_data']
