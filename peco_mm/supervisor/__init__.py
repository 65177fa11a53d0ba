"""The supervisor: what tools/train.py, tools/test.py and the other tools use to run a config
safely, which no config builds. A layer above the core (it imports the core; the core never
imports it) and below tool support (`peco_mm.tooling`).

- `launch`: `run(config, work_dir, options, mode)`, the one entry point of both tools, the
  demo and the tests; the host flags folded into the config, the runner built;
- `preflight` (with `class_counts`; standard library only): every missing input at once;
- `config_keys`: unknown hook / model / run keys named with the nearest valid one;
- `console`: the console filter on the run's logger; `work_dir_lock`: one run per work dir;
- `safeguards`: the hooks and wrappers added to a training config (`resume`: `--resume`
  without a path); `label_checks`, `seg_classes`: the run's labels against the model's classes;
- `workers`, `malloc`, `distributed`, `process_tree`: the machine (data loader workers, the CPU
  allocator, process groups for standalone tools, no process outliving its parent);
- `file_checks`: every file of a dataset read as training reads it (tools/check_dataset.py).
"""
