"""Tool support, outside the core: what `tools/` and the tests use and no config builds.

Benchmarks and the memory planner (`benchmark`, `memory`, `gpu_check`), the toy configs'
photo data (`demo_data`), the study's (and so `make demo`'s) image world, runs, stages, network
checks, report and its paired statistics (`shape_world`, `study_runs`, `study_stages`,
`demo_checks`, `study_tables`, `study_report`, `paired_stats`), the measurements behind
docs/tokenizer.md and docs/benchmarks.md (`inputs`, `loss_balance`, `code_agreement`), log
plotting (`logs`), the multi-run tools' helpers (`tool_runs`), and weights export to timm and
transformers (`export`, tools/export_checkpoint.py). The core (`import peco_mm`) never imports
this package (tests/test_layering.py checks it).
"""
