"""Does the tokenizer learn the same in bf16 as in fp32? Paired replicates on the study's shape
world (peco_mm/tooling/precision_study.py): per replicate one world, one random perceptual
network and two tokenizers, fp32 and bf16 (`model.train_bf16=True`), with the same seed;
PSNR, codeword probe, matched-pair agreement and codebook usage; paired 95 % intervals of the
differences against margins fixed in advance.

    python tools/tokenizer_bf16.py [--replicates 5] [--iters 60] [--batch 16] [--threads 2]
        [--work-dir work_dirs/tokenizer_bf16] [--out docs/results/tokenizer_bf16/cpu.json]

A replicate whose result.json exists (same --iters and --batch) is kept, so an interrupted
run resumes.
Where the CPU has no native bf16 (AVX512-BF16 / AMX) bf16 is emulated: the numbers are
still those of bf16 arithmetic, at many times the time.
"""
import argparse
import os.path as osp
import sys
sys.path.append(osp.dirname(osp.realpath(__file__)))  # tools/, however the tool is started
import check_environment  # noqa: E402,F401 (first: outside the environment, names the fix)

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

EPILOG = """examples:
  python tools/tokenizer_bf16.py --replicates 5 --iters 80 --batch 16 --threads 2 \\
      --out docs/results/tokenizer_bf16/cpu.json     # what docs/benchmarks.md reports
  python tools/tokenizer_bf16.py --replicates 2 --iters 4 --batch 2   # a quick look
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--replicates', type=int, default=5, help='paired replicates (>= 2)')
    p.add_argument('--iters', type=int, default=60, help='training iterations per tokenizer')
    p.add_argument('--batch', type=int, default=16, help='images per iteration')
    p.add_argument('--work-dir', default='work_dirs/tokenizer_bf16', help='runs and worlds')
    p.add_argument('--out', default=None, help='write the summary JSON here')
    p.add_argument('--threads', type=int, default=None, help='torch CPU threads')
    args = p.parse_args(argv)
    if args.replicates < 2 or args.iters < 1:
        p.error(f'--replicates {args.replicates} --iters {args.iters}: a paired interval '
                'needs at least 2 replicates and a run at least 1 iteration')
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    from peco_mm.tooling.precision_study import md_comparison, run_comparison
    summary = run_comparison(args.work_dir, args.replicates, args.iters, args.batch,
                             args.out)
    print('\n'.join(md_comparison(summary)))
    return summary


if __name__ == '__main__':
    main()
