"""Checkpoints that a kill cannot break, and a resume that survives one that did.

mmengine 0.10.7's CheckpointHook deletes the oldest kept checkpoint *before* writing the new
one, writes the new one in place, then points `last_checkpoint` at it. A kill inside that
write leaves `last_checkpoint` naming a missing or truncated file (and, with
`max_keep_ckpts=1`, no intact checkpoint at all); `--resume` then fails with
`FileNotFoundError` or `PytorchStreamReader failed reading zip archive`.

`AtomicCheckpointHook` writes each checkpoint to `<name>.part`, fsyncs it, renames it over
`<name>`, then rewrites `last_checkpoint` the same way, and only then deletes the checkpoints
that fall out of `max_keep_ckpts`. It refuses to write a model with non-finite weights.
`find_resumable_checkpoint` picks, for `--resume` without a path, the newest checkpoint of a
work dir that reads back, naming every one it skipped and why.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import glob
import os
import os.path as osp
import shutil
import zipfile

import torch
from mmengine import dist
from mmengine.hooks import CheckpointHook
from mmengine.model import is_model_wrapper

from ...checkpoint.mmengine_loaders import history_buffers_without_methods
from ...checkpoint.reader import file_problem
from ...registry import HOOKS

PART_SUFFIX = '.part'


@HOOKS.register_module()
class AtomicCheckpointHook(CheckpointHook):
    """mmengine's CheckpointHook (same arguments) with crash-safe writes.

    Every checkpoint the runner saves while this hook is installed (periodic, best, last)
    goes through a temporary file and an atomic rename; `last_checkpoint` is updated after
    the rename, and outdated checkpoints are removed after that. Remote `out_dir`s (a URI
    such as `s3://...`) are written as mmengine writes them.
    """

    def before_train(self, runner) -> None:
        super().before_train(runner)
        if not getattr(runner.save_checkpoint, 'is_atomic', False):
            runner.save_checkpoint = atomic_saver(runner, runner.save_checkpoint)

    def _save_checkpoint_with_step(self, runner, step, meta) -> None:
        stale = []
        keep = self.max_keep_ckpts > 0  # (keep_ckpt_ids exists only then)
        if keep and not (self.keep_ckpt_ids and self.keep_ckpt_ids[-1] == step):
            if len(self.keep_ckpt_ids) == self.max_keep_ckpts:
                stale.append(self.keep_ckpt_ids.popleft())
            self.keep_ckpt_ids.append(step)
            runner.message_hub.update_info('keep_ckpt_ids', list(self.keep_ckpt_ids))
        filename = self.filename_tmpl.format(step)
        self.last_ckpt = self.file_backend.join_path(self.out_dir, filename)
        runner.message_hub.update_info('last_ckpt', self.last_ckpt)
        runner.save_checkpoint(
            self.out_dir, filename, self.file_client_args, save_optimizer=self.save_optimizer,
            save_param_scheduler=self.save_param_scheduler, meta=meta, by_epoch=self.by_epoch,
            backend_args=self.backend_args, **self.args)
        if not dist.is_main_process():
            return
        write_text_atomically(osp.join(runner.work_dir, 'last_checkpoint'), self.last_ckpt)
        for old in stale:  # only now: the new checkpoint is complete on disk
            path = self.file_backend.join_path(self.out_dir, self.filename_tmpl.format(old))
            if self.file_backend.isfile(path):
                self.file_backend.remove(path)
            elif self.file_backend.isdir(path):  # DeepSpeed saves folders
                self.file_backend.rmtree(path)


def atomic_saver(runner, save):
    """Wrap `runner.save_checkpoint`: refuse non-finite weights, write `<name>.part`, fsync,
    rename it to `<name>`."""
    # DeepSpeed writes a folder from every rank: renamed by one rank it could be incomplete
    sharded = 'DeepSpeed' in type(getattr(runner, 'strategy', None)).__name__

    @functools.wraps(save)
    def save_atomically(out_dir, filename, *args, **kwargs):
        check_finite_weights(runner.model, filename)
        if '://' in str(out_dir) or sharded:
            with history_buffers_without_methods():
                return save(out_dir, filename, *args, **kwargs)
        part = osp.join(out_dir, filename + PART_SUFFIX)
        with history_buffers_without_methods(), cleaned_up_on_error(part):
            # loadable with weights_only=True
            result = save(out_dir, filename + PART_SUFFIX, *args, **kwargs)
            if dist.is_main_process() and osp.exists(part):  # the main process wrote it
                commit_file(part, osp.join(out_dir, filename))
        return result
    save_atomically.is_atomic = True
    return save_atomically


def check_finite_weights(model: torch.nn.Module, filename: str) -> None:
    """Raise FloatingPointError naming the non-finite tensors, so that a diverged model never
    replaces a good checkpoint."""
    bad = nonfinite_tensors(model)
    if bad:
        shown = ', '.join(bad[:3]) + (' ...' if len(bad) > 3 else '')
        raise FloatingPointError(
            f'not saving {filename}: {len(bad)} weight tensors hold NaN/inf ({shown}); the '
            'earlier checkpoints are kept. Lower the learning rate or add gradient clipping '
            '(optim_wrapper.clip_grad=dict(max_norm=...)), check the data '
            '(tools/check_dataset.py CONFIG), or train in bf16/fp32 instead of fp16.')


def nonfinite_tensors(model: torch.nn.Module) -> list[str]:
    """Names of the model's parameters and buffers that hold NaN/inf, agreed over ranks
    (['(on another rank)'] when only another rank has some)."""
    module = model.module if is_model_wrapper(model) else model
    if not isinstance(module, torch.nn.Module):
        return []
    tensors = list(module.named_parameters()) + list(module.named_buffers())
    bad = [n for n, t in tensors if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if dist.get_world_size() > 1:
        count = torch.tensor([float(len(bad))], device=tensors[0][1].device if tensors else None)
        dist.all_reduce(count, op='sum')  # every rank agrees (FSDP: each checks its shard)
        if count.item() and not bad:
            bad = ['(on another rank)']
    return bad


def commit_file(part: str, final: str) -> None:
    """fsync `part`, rename it over `final` (atomic on POSIX), fsync the folder."""
    if osp.isfile(part):
        with open(part, 'rb') as f:
            os.fsync(f.fileno())
    os.replace(part, final)
    fsync_dir(osp.dirname(final) or '.')


@contextlib.contextmanager
def cleaned_up_on_error(part: str):
    """Remove `part` when the write inside fails; a full disk (or quota) is reported with the
    path and the free space instead of a bare `[Errno 28]`."""
    try:
        yield
    except BaseException as err:
        if osp.exists(part):
            with contextlib.suppress(OSError):  # the error below is the one to report
                os.remove(part)
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            folder = osp.dirname(part) or '.'
            try:
                free = f'{shutil.disk_usage(folder).free / 2**20:.1f} MiB free'
            except OSError:
                free = 'free space unknown'
            raise OSError(err.errno, f'{os.strerror(err.errno)} while writing {part} '
                          f'({free} in {folder}); the unfinished file was removed and the '
                          'earlier checkpoints are kept. Free some space (or set '
                          'default_hooks.checkpoint.max_keep_ckpts / out_dir), then resume '
                          'with --resume') from err
        raise


def write_text_atomically(path: str, text: str) -> None:
    part = path + PART_SUFFIX
    with cleaned_up_on_error(part):
        with open(part, 'w') as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, path)
    fsync_dir(osp.dirname(path) or '.')


def fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. a platform without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---- resume --------------------------------------------------------------------------------
def checkpoint_problem(path: str) -> str | None:
    """Why `path` cannot be resumed from (None if it reads back): missing, empty, not a torch
    checkpoint, or a truncated / corrupt archive (every member's CRC is checked; no
    unpickling)."""
    if not osp.exists(path):
        return 'missing'
    if osp.isdir(path):
        return None  # a DeepSpeed checkpoint folder: left to its loader
    problem = file_problem(path)  # empty, not a torch checkpoint, truncated zip
    if problem or not zipfile.is_zipfile(path):
        return problem  # (a legacy torch file: read_checkpoint judges it)
    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        return f'corrupt archive ({e})'
    return f'corrupt member {bad}' if bad else None


def in_work_dir(named: str, work_dir: str, notes: list[str]) -> str:
    """The file `last_checkpoint` names, taken from `work_dir` (by its file name)."""
    local = osp.join(work_dir, osp.basename(named))
    if osp.abspath(named) != osp.abspath(local):
        notes.append(f'resume: last_checkpoint names {named}, outside this work dir (a copied '
                     f'or moved work dir?); looking for {osp.basename(named)} in {work_dir}')
    return local


def find_resumable_checkpoint(work_dir: str) -> tuple[str | None, list[str]]:
    """The checkpoint `--resume` (no path) should use, and one line per skipped candidate.

    Candidates: the file `last_checkpoint` names, then every `*.pth` in `work_dir`, newest
    first (by modification time); the first that reads back wins. A candidate that is a
    symlink to a file outside the work dir is refused (`refuse_link_out_of`).
    `last_checkpoint` holds the path the run wrote, so in a copied or moved work dir it names
    the original folder: its file name is looked up in `work_dir` instead (and a note says
    so).
    """
    notes = []
    candidates = []
    pointer = osp.join(work_dir, 'last_checkpoint')
    if osp.isfile(pointer):
        with open(pointer) as f:
            named = f.read().strip()
        if named:
            candidates.append(in_work_dir(named, work_dir, notes))
        else:
            notes.append(f'{pointer} is empty (written when the run was killed?)')
    found = sorted(glob.glob(osp.join(work_dir, '*.pth')), key=osp.getmtime, reverse=True)
    candidates += [p for p in found if osp.abspath(p) not in map(osp.abspath, candidates)]
    for path in candidates:
        refuse_link_out_of(path, work_dir)
        problem = checkpoint_problem(path)
        if problem is None:
            return path, notes
        notes.append(f'resume: skipped {path}: {problem}')
    return None, notes


def refuse_link_out_of(path: str, work_dir: str) -> None:
    """Raise ValueError when `path` is a symlink whose target lies outside `work_dir`: a
    resume without a path takes only the work dir's own files (pass a checkpoint elsewhere
    explicitly with --resume PATH)."""
    if not osp.islink(path):
        return
    target = osp.realpath(path)
    root = osp.realpath(work_dir)
    if osp.commonpath([target, root]) != root:
        raise ValueError(f'resume: {path} is a symlink to {target}, outside the work dir '
                         f'{work_dir}; refusing it. If you trust that file, pass it with '
                         '--resume PATH')


def remove_unfinished_writes(work_dir: str) -> list[str]:
    """Delete the `<name>.part` files a killed or failed save left in `work_dir` (they are
    never resumed from, and may hold the space the next save needs); one note per file."""
    notes = []
    for part in sorted(glob.glob(osp.join(work_dir, '*' + PART_SUFFIX))):
        try:
            size = osp.getsize(part)
            os.remove(part)
        except OSError:  # removed by another rank meanwhile
            continue
        notes.append(f'resume: removed {part} ({size / 2**20:.1f} MiB), an unfinished write')
    return notes
