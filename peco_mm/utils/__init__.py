"""Small helpers the core uses: image reading and grids, the CPU allocator setting, process
groups for standalone tools, frozen networks held outside a module's tree (`held`). Tool
support (benchmarks, demo data, the study) is in `peco_mm.tooling`."""
