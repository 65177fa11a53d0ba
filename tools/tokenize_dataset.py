#!/usr/bin/env python3
"""Tokenize an image folder into a code file with a trained PeCo tokenizer.

Writes OUT (.npz): `codes` (N, h, w) uint16 (int32 when K > 65536), `files` (paths relative
to IMAGES, sorted) and `num_embeddings`. CHECKPOINT is a tools/train.py checkpoint of a
tokenizer config (its architecture is read from the checkpoint). A file that stores no config
and holds no CNN encoder (e.g. a ViT-encoder tokenizer saved as a bare state dict) needs the
architecture with --arch PART=CONFIG ... (encoder, decoder, quantizer)

Long jobs: the sorted file list is cut into chunks of --chunk-size images; each finished chunk
is written to OUT.parts/ at once, and a rerun with the same arguments skips the chunks that are
there (resume after a crash or a kill). Under torchrun each process takes every N-th chunk
(N = world size), so several processes or GPUs share the work; rank 0 joins the chunks into
OUT when all are done. Images are read by --workers DataLoader processes. The codes do not
depend on the number of processes or workers.
"""
import argparse
import os
import os.path as osp
import sys
sys.path.append(os.path.dirname(os.path.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

EPILOG = """examples:
  tools/tokenize_dataset.py tokenizer.pth data/imagenet/train --out codes.npz --workers 8
  torchrun --nproc_per_node 8 tools/tokenize_dataset.py tokenizer.pth data/imagenet/train \\
      --out codes.npz --workers 8 --device cuda          # one shard of chunks per GPU
  (rerun the same command after an interruption: finished chunks are skipped)
  tools/tokenize_dataset.py vit_tok.pth images --out codes.npz \\
      --arch "encoder={'type': 'ViTEncoder', 'arch': 'small'}" \\
             "quantizer={'type': 'EMAVectorQuantizer', 'num_embeddings': 8192, 'embed_dims': 32}"
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('checkpoint', help='tokenizer checkpoint (tools/train.py)')
    p.add_argument('images', help='an image folder (searched recursively) or one image')
    p.add_argument('--out', required=True, help='output .npz file')
    p.add_argument('--img-size', type=int, default=224,
                   help='short side resized to this, centre crop (224)')
    p.add_argument('--batch-size', type=int, default=64)
    p.add_argument('--workers', type=int, default=4, help='DataLoader processes per rank (4)')
    p.add_argument('--chunk-size', type=int, default=4096,
                   help='images per resumable chunk (4096)')
    p.add_argument('--device', help='cpu or cuda (default: cuda when available; under '
                   'torchrun cuda:LOCAL_RANK)')
    p.add_argument('--arch', nargs='+', default=[], metavar='PART=CONFIG',
                   help='tokenizer part configs for a checkpoint that stores none (encoder, '
                   'decoder, quantizer; Python dict literals), e.g. '
                   '"encoder={\'type\': \'ViTEncoder\', \'arch\': \'small\'}"; the old '
                   'flat arguments (encoder_type=vit ...) are read too')
    p.add_argument('--keep-parts', action='store_true', help='keep OUT.parts/ after joining')
    p.add_argument('--stop-after', type=int, metavar='N',
                   help='encode at most N chunks per process, then exit without joining (split '
                   'a long job into sessions; the next run resumes)')
    args = p.parse_args(argv)
    for k in ('img_size', 'batch_size', 'chunk_size'):
        if getattr(args, k) < 1:
            p.error(f'--{k.replace("_", "-")} must be >= 1, got {getattr(args, k)}')
    if args.workers < 0:
        p.error(f'--workers must be >= 0, got {args.workers}')
    try:
        args.arch = parse_arch(args.arch)
    except ValueError as err:
        p.error(str(err))
    return args


def parse_arch(pairs) -> dict:
    """["encoder={'type': 'ViTEncoder'}", 'embed_dims=32'] -> {'encoder': {'type':
    'ViTEncoder'}, 'embed_dims': 32}: each value a Python literal (numbers, tuples, dicts),
    else the plain string."""
    import ast
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition('=')
        if not sep or not key:
            raise ValueError(f'--arch {pair!r}: expected PART=CONFIG')
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


class ImageFiles:
    """torch Dataset of (3, size, size) images in [-1, 1], the tokenizer's input."""

    def __init__(self, files, size: int) -> None:
        self.files, self.size = files, size

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        from peco_mm.tooling.images import load_image
        return load_image(self.files[i], self.size)


def chunk_file(parts: str, c: int) -> str:
    return osp.join(parts, f'chunk_{c:06d}.npy')


def manifest(args, files: list) -> dict:
    """What a resumed run must share with the first one."""
    return dict(checkpoint=osp.abspath(args.checkpoint), images=osp.abspath(args.images),
                num_files=len(files), img_size=args.img_size, chunk_size=args.chunk_size)


def prepare_parts(parts: str, expected: dict, rank: int) -> None:
    """Create OUT.parts/ with its manifest, or check that an existing one is this job's."""
    import json

    from mmengine.dist import barrier
    path = osp.join(parts, 'manifest.json')
    if rank == 0:
        os.makedirs(parts, exist_ok=True)
        if not osp.isfile(path):
            with open(path, 'w') as f:
                json.dump(expected, f, indent=1)
    barrier()
    with open(path) as f:
        found = json.load(f)
    if found != expected:
        diff = {k: (found.get(k), v) for k, v in expected.items() if found.get(k) != v}
        raise SystemExit(f'tokenize_dataset.py: {parts} holds chunks of another job (differs in '
                         f'{diff}, as (there, now)); delete it or change --out')


def encode_chunks(tok, files: list, chunks: list, args, device: str):
    """Yield (chunk index, codes (n, h, w)) for each chunk in `chunks`, in order; one DataLoader
    whose batches never cross a chunk boundary, so its workers serve all chunks."""
    import numpy as np
    import torch
    from torch.utils.data import DataLoader
    size, bs = args.chunk_size, args.batch_size
    batches, owner = [], []
    for c in chunks:
        stop = min((c + 1) * size, len(files))
        for s in range(c * size, stop, bs):
            batches.append(list(range(s, min(s + bs, stop))))
            owner.append(c)
    loader = DataLoader(ImageFiles(files, args.img_size), batch_sampler=batches,
                        num_workers=args.workers, pin_memory=device.startswith('cuda'))
    out = []
    with torch.inference_mode():
        for i, batch in enumerate(loader):
            out.append(tok.encode(batch.to(device, non_blocking=True)).cpu().numpy())
            if i + 1 == len(batches) or owner[i + 1] != owner[i]:
                yield owner[i], np.concatenate(out)
                out = []


def join_chunks(parts: str, n_chunks: int, files: list, args, num_embeddings: int) -> None:
    """OUT from the finished chunks (rank 0, once every rank is done); OUT.parts/ removed
    unless --keep-parts."""
    import numpy as np
    codes = np.concatenate([np.load(chunk_file(parts, c)) for c in range(n_chunks)])
    root = args.images if osp.isdir(args.images) else osp.dirname(args.images)
    rel = np.array([osp.relpath(f, root) for f in files])
    np.savez_compressed(args.out, codes=codes, files=rel, num_embeddings=num_embeddings)
    if not args.keep_parts:
        import shutil
        shutil.rmtree(parts)
    print(f'{len(files)} images -> {args.out}: codes {codes.shape}, '
          f'{len(np.unique(codes))} of {num_embeddings} codes used')


def main(argv=None):
    args = parse_args(argv)
    sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))
    import numpy as np
    from mmengine.dist import barrier
    from tqdm import tqdm

    from peco_mm.tokenizer import FrozenPeCoTokenizer
    from peco_mm.supervisor.distributed import finish, init_from_env
    from peco_mm.tooling.images import find_images
    rank, world, device = init_from_env(args.device)
    try:
        files = find_images(args.images)
    except FileNotFoundError as err:
        raise SystemExit(f'tokenize_dataset.py: {err}')
    from peco_mm.tokenizer.encoding import ARCH_PARTS
    from peco_mm.tokenizer.legacy import FLAT_ARCH_KEYS
    unknown = sorted(set(args.arch) - set(ARCH_PARTS + FLAT_ARCH_KEYS))
    if unknown:
        raise SystemExit(f'tokenize_dataset.py: --arch {", ".join(unknown)}: not a tokenizer '
                         f'part; allowed: {", ".join(ARCH_PARTS)}')
    try:
        tok = FrozenPeCoTokenizer(args.checkpoint, config_key='CHECKPOINT', **args.arch)
        tok.to(device)
    except (ValueError, TypeError) as err:
        raise SystemExit(f'tokenize_dataset.py: {err}. Give it with --arch PART=CONFIG ... '
                         '(e.g. --arch "encoder={\'type\': \'ViTEncoder\', \'arch\': '
                         '\'small\'}" "quantizer={\'type\': \'EMAVectorQuantizer\', '
                         '\'num_embeddings\': 8192, \'embed_dims\': 32}")')
    if args.img_size % tok.downsample:
        raise SystemExit(f"tokenize_dataset.py: --img-size {args.img_size} is not a multiple of "
                         f"the tokenizer's downsampling factor {tok.downsample}")
    dtype = np.uint16 if tok.num_embeddings <= 65536 else np.int32
    parts = args.out + '.parts'
    prepare_parts(parts, manifest(args, files), rank)

    n_chunks = -(-len(files) // args.chunk_size)
    mine = list(range(rank, n_chunks, world))
    todo = [c for c in mine if not osp.isfile(chunk_file(parts, c))]
    if rank == 0:
        print(f'{len(files)} images in {n_chunks} chunks of {args.chunk_size}, {world} '
              f'process(es); rank 0: {len(mine) - len(todo)} of its {len(mine)} chunks done',
              flush=True)
    if args.stop_after is not None:
        todo = todo[:args.stop_after]
    progress = tqdm(total=len(todo), desc=f'rank {rank}', unit='chunk', position=rank)
    for c, codes in encode_chunks(tok, files, todo, args, device):
        tmp = chunk_file(parts, c) + '.tmp'
        with open(tmp, 'wb') as f:
            np.save(f, codes.astype(dtype))
        os.replace(tmp, chunk_file(parts, c))  # a chunk file is complete or absent
        progress.update()
    progress.close()
    if args.stop_after is not None:
        return finish()
    barrier()
    if rank == 0:
        join_chunks(parts, n_chunks, files, args, tok.num_embeddings)
    finish()


if __name__ == '__main__':
    main()
