"""`--resume` without a path: the newest checkpoint of a work dir that reads back.

`find_resumable_checkpoint` takes the file `last_checkpoint` names, then every `*.pth` of the
work dir, newest first, naming every one it skipped and why (missing, empty, truncated or
corrupt archive; CRCs checked, nothing unpickled); a symlink out of the work dir is refused.
`remove_unfinished_writes` deletes the `<name>.part` files of writes that a kill broke
(`AtomicCheckpointHook` writes every checkpoint as one first).
"""
from __future__ import annotations

import glob
import os
import os.path as osp
import zipfile

from ..checkpoint.reader import file_problem
from ..engine.hooks.checkpoint import PART_SUFFIX


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
