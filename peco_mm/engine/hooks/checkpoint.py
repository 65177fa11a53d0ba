"""Checkpoints that a kill cannot break, and a resume that survives one that did.

mmengine 0.10.7's CheckpointHook deletes the oldest kept checkpoint *before* writing the new
one, writes the new one in place, then points `last_checkpoint` at it. A kill inside that
write leaves `last_checkpoint` naming a missing or truncated file (and, with
`max_keep_ckpts=1`, no intact checkpoint at all); `--resume` then fails with
`FileNotFoundError` or `PytorchStreamReader failed reading zip archive`.

`AtomicCheckpointHook` has each checkpoint written to `<name>.part`, fsyncs it, renames it over
`<name>`, then rewrites `last_checkpoint` the same way, and only then deletes the checkpoints
that fall out of `max_keep_ckpts`. It refuses to write a model with non-finite weights. It
uses mmengine's public hook methods only (no private method overridden, nothing patched).
The launcher's `--resume` without a path picks the newest checkpoint of a work dir that reads
back (`peco_mm.supervisor.resume`).
"""
from __future__ import annotations

import contextlib
import errno
import os
import os.path as osp
import re
import shutil
import string
import uuid

import torch
from mmengine import dist
from mmengine.hooks import CheckpointHook
from mmengine.model import is_model_wrapper

from ...checkpoint import read_checkpoint
from ...checkpoint.plain import history_buffers_restored, plain_checkpoint
from ...registry import HOOKS
from ...utils.finite import nonfinite_names

PART_SUFFIX = '.part'


@HOOKS.register_module()
class AtomicCheckpointHook(CheckpointHook):
    """mmengine's CheckpointHook (same arguments) with crash-safe writes, through mmengine's
    public hook methods only.

    - The parent writes every checkpoint (periodic, best, last) as `<name>.part`
      (`filename_tmpl` gains the suffix); right after, this hook fsyncs it, renames it to
      `<name>` and points `last_checkpoint` at it, both atomically.
    - `max_keep_ckpts` is applied here, after the rename (the parent, given -1, deletes
      nothing): mmengine deletes the oldest checkpoint before it writes the new one.
    - `before_save_checkpoint` refuses a model with non-finite weights, and stores the
      checkpoint as plain data (`peco_mm.checkpoint.plain`: the message hub's HistoryBuffers
      as dicts), so that it loads with `torch.load(weights_only=True)` and every host's
      loader; `after_load_checkpoint` turns them back into HistoryBuffers on resume.
    - Each checkpoint records its run lineage (`meta.run_id`: made at the first start, carried
      through every resume). Pruning deletes only files this process wrote, or whose own
      `meta.run_id` (read through the gate) is the lineage's; never a folder, never a link;
      each deletion is logged. A downloaded checkpoint resumed in a work dir of other runs
      therefore deletes none of their files, whatever its kept list names.

    Remote `out_dir`s (a URI such as `s3://...`) and DeepSpeed's checkpoint folders are written
    as mmengine writes them (no rename); outdated remote files this process wrote are removed
    after the new one, folders never (each left one is logged).
    """

    def __init__(self, *args, max_keep_ckpts: int = -1, **kwargs) -> None:
        super().__init__(*args, max_keep_ckpts=-1, **kwargs)
        self.keep = max_keep_ckpts
        self.kept: list[str] = []  # periodic checkpoints written, oldest first
        self.written: set[str] = set()  # checkpoints this process wrote (final names)
        self.run_id = ''  # the run lineage's identity (`lineage_id`)
        self.log = print  # the runner's logger.info, from before_train

    def before_train(self, runner) -> None:
        super().before_train(runner)
        renames = not ('://' in str(self.out_dir) or sharded(runner))
        if renames and not self.filename_tmpl.endswith(PART_SUFFIX):
            self.filename_tmpl += PART_SUFFIX
        hub = runner.message_hub
        self.log = runner.logger.info
        self.run_id = lineage_id(hub)
        kept = hub.get_info('kept_checkpoints') or []
        if not kept and hub.get_info('keep_ckpt_ids'):  # written by mmengine's hook
            tmpl = self.filename_tmpl.removesuffix(PART_SUFFIX)
            kept = [tmpl.format(step) for step in hub.get_info('keep_ckpt_ids')]
        self.kept = self.own_checkpoints(kept, runner)
        self.own_best_checkpoints(runner)
        self.prune()  # a smaller max_keep_ckpts on resume

    def own_checkpoints(self, stored, runner) -> list[str]:
        """The resumed run's kept checkpoints as files of this run's folder: each taken by
        its file name in `out_dir` (a copied work dir prunes its own files, never the
        original's), and only a name this hook writes (`filename_tmpl` with a number);
        anything else (another folder's file, '../x', not a string) is left alone, with one
        log line."""
        pattern = checkpoint_name_pattern(self.filename_tmpl.removesuffix(PART_SUFFIX))
        own, ignored = [], []
        for path in stored if isinstance(stored, (list, tuple)) else [stored]:
            name = osp.basename(path) if isinstance(path, str) else ''
            if pattern.fullmatch(name):
                own.append(self.file_backend.join_path(self.out_dir, name))
            else:
                ignored.append(path)
        if ignored:
            runner.logger.warning(
                f'resume: the checkpoint lists {len(ignored)} kept checkpoints that this run '
                f'does not write in {self.out_dir} (e.g. {str(ignored[0])[:200]!r}); they are '
                'left alone, never deleted')
        return own

    def own_best_checkpoints(self, runner) -> None:
        """The same for the best checkpoints the parent deletes when a better one comes:
        taken by file name in `out_dir`, only names of the form best_*.pth."""
        paths = dict(best_ckpt=getattr(self, 'best_ckpt_path', None))
        paths.update({k: v for k, v in (getattr(self, 'best_ckpt_path_dict', None)
                                        or {}).items()})
        for key, path in paths.items():
            if path is None:
                continue
            name = osp.basename(path) if isinstance(path, str) else ''
            own = (self.file_backend.join_path(self.out_dir, name)
                   if BEST_NAME.fullmatch(name) else None)
            if own is None:
                runner.logger.warning(f'resume: the checkpoint names {str(path)[:200]!r} as '
                                      'its best checkpoint, not one this run writes; it is '
                                      'left alone, never deleted')
            elif self.file_backend.exists(own) and not self.of_this_lineage(own):
                runner.logger.warning(f'resume: {own}, named as the best checkpoint, was '
                                      'written by another run; it is left alone, never '
                                      'deleted')
                own = None
            if key == 'best_ckpt':
                self.best_ckpt_path = own
            else:
                self.best_ckpt_path_dict[key] = own

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        last = self.last_ckpt or ''
        # the Runner and the DDP strategy call this on the main process only (the weights are
        # replicated there); the FSDP strategy on every rank, each holding its shard
        check_finite_weights(runner.model, osp.basename(last.removesuffix(PART_SUFFIX))
                             if last.endswith(PART_SUFFIX) else 'a checkpoint',
                             agree='FSDP' in type(getattr(runner, 'strategy', None)).__name__)
        meta = checkpoint.setdefault('meta', {})
        if isinstance(meta, dict) and self.run_id:
            meta['run_id'] = self.run_id
        hub = checkpoint.get('message_hub')
        if isinstance(hub, dict):
            info = hub.setdefault('runtime_info', {})
            for key, value in list(info.items()):  # the names the files will have
                if isinstance(value, str):
                    info[key] = value.removesuffix(PART_SUFFIX)
            last = info.get('last_ckpt')
            info['kept_checkpoints'] = (self.kept_after(last) if isinstance(last, str)
                                        else self.kept)
        plain_checkpoint(checkpoint)

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        """The message hub's buffers, stored as plain data, become HistoryBuffers again before
        the runner loads them (a resume then logs as an uninterrupted run)."""
        history_buffers_restored(checkpoint.get('message_hub'))

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        with self.no_part_left():
            super().after_train_iter(runner, batch_idx, data_batch, outputs)
        self.commit(runner)

    def after_train_epoch(self, runner) -> None:
        with self.no_part_left():
            super().after_train_epoch(runner)
        self.commit(runner)

    def after_val_epoch(self, runner, metrics) -> None:
        with self.no_part_left():  # best checkpoints, and a periodic re-save
            super().after_val_epoch(runner, metrics)
        self.commit(runner)

    @contextlib.contextmanager
    def no_part_left(self):
        """A write that fails (a full disk) leaves no `.part` file, and says why."""
        try:
            yield
        except BaseException:
            paths = [self.last_ckpt, getattr(self, 'best_ckpt_path', None),
                     *(getattr(self, 'best_ckpt_path_dict', None) or {}).values()]
            parts = [p for p in paths if isinstance(p, str) and p.endswith(PART_SUFFIX)
                     and osp.exists(p)]
            if not parts:
                raise
            with cleaned_up_on_error(parts[0]):
                raise

    def commit(self, runner) -> None:
        """Rename the `.part` files the parent just wrote, point `last_checkpoint` and the
        message hub at the final names, then drop the checkpoints beyond `max_keep_ckpts`."""
        self.commit_best(runner)
        last = self.last_ckpt
        if last is None or (not last.endswith(PART_SUFFIX) and last in self.kept[-1:]):
            return  # nothing new saved
        final = finish_part(last)
        self.written.add(final)
        if last != final and dist.is_main_process():
            write_text_atomically(osp.join(runner.work_dir, 'last_checkpoint'), final)
        self.last_ckpt = final
        runner.message_hub.update_info('last_ckpt', final)
        stale = [p for p in self.kept if p not in self.kept_after(final)]
        self.kept = self.kept_after(final)
        runner.message_hub.update_info('kept_checkpoints', list(self.kept))
        self.prune(stale)

    def commit_best(self, runner) -> None:
        """The same for the best checkpoints (`save_best`)."""
        paths = dict(best_ckpt=getattr(self, 'best_ckpt_path', None))
        paths.update({f'best_ckpt_{k}': v
                      for k, v in (getattr(self, 'best_ckpt_path_dict', None) or {}).items()})
        for key, path in paths.items():
            if not (isinstance(path, str) and path.endswith(PART_SUFFIX)):
                continue
            final = finish_part(path)
            runner.message_hub.update_info(key, final)
            if key == 'best_ckpt':
                self.best_ckpt_path = final
            else:
                self.best_ckpt_path_dict[key[len('best_ckpt_'):]] = final

    def kept_after(self, path: str) -> list[str]:
        kept = [p for p in self.kept if p != path] + [path]
        return kept[-self.keep:] if self.keep > 0 else kept

    def prune(self, stale: list[str] | None = None) -> None:
        """Delete `stale` (or, on resume, what exceeds `max_keep_ckpts`); main process only.
        Only files this process wrote or of this run lineage (`of_this_lineage`) are deleted,
        each with a log line; links, folders and other runs' files are left alone."""
        if stale is None:
            stale = self.kept[:-self.keep] if self.keep > 0 else []
            self.kept = self.kept[len(stale):]
        if not dist.is_main_process():
            return
        why = f'beyond max_keep_ckpts={self.keep}'
        for path in stale:
            if osp.islink(path) or not self.file_backend.exists(path):
                continue  # a link: not a file this run wrote
            if self.file_backend.isdir(path):  # e.g. DeepSpeed's: never removed recursively
                self.log(f'checkpoint {path} ({why}) left alone: a folder, and folders are '
                         'never deleted; remove it yourself when it is no longer needed')
            elif path in self.written or self.of_this_lineage(path):
                self.file_backend.remove(path)
                self.log(f'removed checkpoint {path} ({why})')
            else:
                self.log(f'checkpoint {path} ({why}) left alone: it was not written by this '
                         f'run (its meta.run_id is not {self.run_id})')

    def of_this_lineage(self, path: str) -> bool:
        """Whether the checkpoint at `path` records this run lineage's `run_id`, read through
        the gate (False for a file it cannot read, or one in a remote store)."""
        if '://' in path or not self.run_id:
            return False
        try:
            meta = read_checkpoint(path, mmap=True).get('meta')
        except (ValueError, OSError, AttributeError):
            return False
        return isinstance(meta, dict) and meta.get('run_id') == self.run_id


def lineage_id(hub) -> str:
    """The run lineage's identity: the one a resumed checkpoint's message hub carries, else a
    new random one (the same on every rank), kept in the hub so that checkpoints carry it."""
    run_id = hub.get_info('run_id')
    if not (isinstance(run_id, str) and RUN_ID.fullmatch(run_id)):
        run_id = [uuid.uuid4().hex]
        if dist.get_world_size() > 1:
            dist.broadcast_object_list(run_id)
        run_id = run_id[0]
    hub.update_info('run_id', run_id)
    return run_id


RUN_ID = re.compile(r'[0-9a-f]{32}')
# the best checkpoints mmengine's hook writes: best_<metric>_<epoch|iter>_<n>.pth
BEST_NAME = re.compile(r'best_[\w.-]*_(epoch|iter)_\d+\.pth')


def checkpoint_name_pattern(tmpl: str) -> re.Pattern:
    """The file names `tmpl` gives for numbered checkpoints ('iter_{}.pth' ->
    iter_<digits>.pth), as a regular expression."""
    literal = [re.escape(text) for text, *_ in string.Formatter().parse(tmpl)]
    return re.compile(r'\d+'.join(literal) if len(literal) > 1 else re.escape(tmpl) + r'\d+')


def finish_part(path: str) -> str:
    """The final name of a file the parent hook wrote (`<name>.part` -> `<name>`), renamed
    there by the main process; other paths unchanged."""
    final = path.removesuffix(PART_SUFFIX)
    if final != path and dist.is_main_process() and osp.exists(path):
        commit_file(path, final)
    return final


def sharded(runner) -> bool:
    """DeepSpeed writes a folder from every rank: renamed by one rank it could be incomplete."""
    return 'DeepSpeed' in type(getattr(runner, 'strategy', None)).__name__


def check_finite_weights(model: torch.nn.Module, filename: str, agree: bool = True) -> None:
    """Raise FloatingPointError naming the non-finite tensors, so that a diverged model never
    replaces a good checkpoint (`agree`: as `nonfinite_tensors`)."""
    bad = nonfinite_tensors(model, agree)
    if bad:
        shown = ', '.join(bad[:3]) + (' ...' if len(bad) > 3 else '')
        raise FloatingPointError(
            f'not saving {filename}: {len(bad)} weight tensors hold NaN/inf ({shown}); the '
            'earlier checkpoints are kept. Lower the learning rate or add gradient clipping '
            '(optim_wrapper.clip_grad=dict(max_norm=...)), check the data '
            '(tools/check_dataset.py CONFIG), or train in bf16/fp32 instead of fp16.')


def nonfinite_tensors(model: torch.nn.Module, agree: bool = True) -> list[str]:
    """Names of the model's parameters and buffers that hold NaN/inf; with `agree`, agreed
    over ranks (['(on another rank)'] when only another rank has some): every rank must call
    it then."""
    module = model.module if is_model_wrapper(model) else model
    if not isinstance(module, torch.nn.Module):
        return []
    bad = nonfinite_names(module)
    if agree and dist.get_world_size() > 1:
        tensors = list(module.parameters()) + list(module.buffers())
        count = torch.tensor([float(len(bad))], device=tensors[0].device if tensors else None)
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
