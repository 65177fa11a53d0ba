"""The Markdown tables tools/benchmark.py prints, one per sub-command, and the median-and-range
table over fresh-process repeats."""
from __future__ import annotations

import statistics


def of_peak(gflop_per_s: float, peak: float) -> str:
    return f'{gflop_per_s:.0f} ({gflop_per_s / peak:.0%})'


def md_tokenizer(rows: list, peak: float) -> list[str]:
    base = rows[0]['img_per_s']
    out = ['| tokenizer encode | input | GFLOPs / image | img/s | vs PeCo default | '
           'GFLOP/s (of GEMM) |', '|---|---|---:|---:|---:|---:|']
    return out + [f"| {r['model']} | {r['img_size']} px | {r['gflops']:.1f} | "
                  f"{r['img_per_s']:.2f} | {r['img_per_s'] / base:.2f}x | "
                  f"{of_peak(r['gflop_per_s'], r.get('of_gemm', peak))} |"
                  for r in rows]


def md_pretrain(rows: list, peak: float) -> list[str]:
    ref = next((r['ms_per_step'] for r in rows if r['model'] == 'beit'), None)
    out = ['| pretraining step | ms/step | img/s | vs BEiT | GFLOPs / step | GFLOP/s (of GEMM) | '
           'trainable M | target gen. M | peak GPU memory |',
           '|---|---:|---:|---:|---:|---:|---:|---:|---:|']
    for r in rows:
        ratio = f"{r['ms_per_step'] / ref:.2f}" if ref else '-'
        mem = f"{r['peak_mem_gib']} GiB" if 'peak_mem_gib' in r else '-'
        out.append(f"| {r['model']} | {r['ms_per_step']} | {r['img_per_s']} | {ratio} | "
                   f"{r['gflops_per_step']} | "
                   f"{of_peak(r['gflop_per_s'], r.get('of_gemm', peak))} | {r['trainable_m']} | "
                   f"{r['target_generator_m']} | {mem} |")
    return out


# the row name and the figure each timing section is compared on
REPEAT_KEYS = dict(tokenizer=('model', 'img_per_s'), tokenizer_train=('model', 'img_per_s'),
                   pretrain=('model', 'ms_per_step'),
                   dense=('config', 's_per_step'), data=('config', 'ms_per_sample'),
                   data_steps=('what', 'ms_per_sample'))


def num(v: float) -> str:
    """4 significant digits, without an exponent."""
    return f'{v:.0f}' if abs(v) >= 1000 else f'{v:.4g}'


def md_repeats(runs: list[dict]) -> list[str]:
    """Median and range over fresh-process runs, one row per (section, row, allocator)."""
    lines = []
    for section, (key, value) in REPEAT_KEYS.items():
        table: dict = {}
        for run in runs:
            for r in run.get(section, []):
                table.setdefault((r[key], run['malloc']), []).append(r)
        if not table:
            continue
        n = max(len(v) for v in table.values())
        lines += [f'| {section} | malloc | {value} (median of {n} runs) | min - max | '
                  'GFLOP/s (of GEMM) |', '|---|---|---:|---:|---:|']
        for (name, malloc), rows in table.items():
            vals = sorted(r[value] for r in rows)
            flops = '-'
            if 'gflop_per_s' in rows[0]:
                gemm = [r['of_gemm'] for r in rows if 'of_gemm' in r] or [
                    run['gemm_gflops'] for run in runs]
                flops = of_peak(statistics.median(r['gflop_per_s'] for r in rows),
                                statistics.median(gemm))
            lines.append(f'| {name} | {malloc} | {num(statistics.median(vals))} | '
                         f'{num(vals[0])} - {num(vals[-1])} | {flops} |')
        lines.append('')
    return lines


def md_data(rows: list) -> list[str]:
    out = ['| train pipeline | ms / sample | views | input KiB / sample |', '|---|---:|---:|---:|']
    return out + [f"| {r['config']} | {r['ms_per_sample']} | {r['views']} | {r['input_kib']} |"
                  for r in rows]


def md_dense(rows: list) -> list[str]:
    out = ['| training step | batch | params M | s/step | img/s |', '|---|---:|---:|---:|---:|']
    return out + [f"| {r['config']} | {r['batch']} | {r['params_m']} | {r['s_per_step']} | "
                  f"{r['img_per_s']} |" for r in rows]


def md_memory(res: dict) -> list[str]:
    gib, mib = 2**30, 2**20
    if not res['estimated']:
        head = [f"Peak tensor memory of one training step, measured on {res['device']} "
                f"(torch.cuda.max_memory_allocated). amp: {res['amp']}.", '']
    else:
        m = res['model']
        batches = list(m['measured'])
        head = [f"Peak tensor memory of one training step, **estimated**: measured on "
                f"{res['device']} at batch {', '.join(map(str, batches))} and extrapolated "
                f"linearly per phase (amp: {res['amp']}):", '',
                '| phase | ' + ' | '.join(f'batch {b} (measured)' for b in batches) +
                ' | fixed + per image |', '|---|' + '---:|' * (len(batches) + 1)]
        for p in m['fixed']:
            head.append(f'| {p} | ' + ' | '.join(f"{m['measured'][b][p] / gib:.2f} GiB"
                                                 for b in batches) +
                        f" | {m['fixed'][p] / gib:.2f} GiB + {m['per_image'][p] / mib:.1f} MiB |")
        head += ['', f"Largest residual of the fits: {m['max_residual'] / mib:.1f} MiB."]
        if m['max_residual'] > 0.01 * max(m['measured'][batches[-1]].values()):
            head.append('WARNING: the peaks are not linear over these batches (at small '
                        'batches the backward peak is set by the gradients, not the '
                        'activations): measure at larger batches.')
        head.append('')
    tag = ' (estimated)' if res['estimated'] else ''
    rows = [f"| {b} | {v / gib:.1f} GiB{tag} |" + (f" {res['phase'][b]} |" if tag else '')
            for b, v in res['peak'].items()]
    return head + ['| batch per GPU | peak memory |' + (' peak in |' if tag else ''),
                   '|---:|---:|' + ('---|' if tag else '')] + rows


def with_precision(row: dict, key: str, precision: str | None, gemm: dict) -> dict:
    """A row of a --precision run: its precision, its name tagged with it, and the GEMM rate of
    the same precision to compare with (`of_gemm`)."""
    if precision is None:
        return row
    return dict(row, **{key: f'{row[key]} [{precision}]'}, precision=precision,
                of_gemm=gemm[precision])


def md_data_steps(rows: list[dict], step_s: float, cores: int, workers: int) -> list[str]:
    """Per-step table (one column per config) and the workers each config needs."""
    from .data_bench import workers_needed
    configs = list(dict.fromkeys(r['config'] for r in rows))
    steps = list(dict.fromkeys(r['step'] for r in rows))
    ms = {(r['config'], r['step']): r['ms_per_sample'] for r in rows}
    out = [f"Per sample, step by step, on {rows[0]['jpeg_kib']} KiB 500x375 JPEGs (mean of "
           f"the samples; collate over batch {rows[0]['batch']}):", '',
           '| step | ' + ' | '.join(f'{c} ms' for c in configs) + ' |',
           '|---|' + '---:|' * len(configs)]
    out += [f'| {s} | ' + ' | '.join(num(ms[c, s]) if (c, s) in ms else '-' for c in configs)
            + ' |' for s in steps]
    out.append('')
    for c in configs:
        need = workers_needed(ms[c, 'total'], rows[0]['batch'], step_s)
        out.append(f"- {c}: {need} worker(s) make a batch of {rows[0]['batch']} within a "
                   f"{step_s} s step; {cores} cores per GPU give {workers} by default "
                   f"({'enough' if workers >= need else 'too few'}).")
    return out
