"""Small helpers the core uses: image reading and grids, bf16 detection (`precision`), frozen
networks held outside a module's tree (`held`). The launcher's machine settings (the CPU
allocator, process groups for standalone tools) are `peco_mm.supervisor`'s; tool support
(benchmarks, demo data, the study) is in `peco_mm.tooling`."""
