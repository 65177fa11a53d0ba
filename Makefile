# peco_mm: the two commands a user needs, `make demo` and `make test`; both install on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
# xdist workers for the test suite (2 cores here); `make test PYTEST_WORKERS=0` runs serially.
# loadfile keeps a module on one worker, so module fixtures (a tiny training run) run once.
PYTEST_WORKERS ?= 2
WORK_DIR ?= work_dirs/demo

.PHONY: install test test-mmengine-low test-torch-low demo lint clean gpu-check

install:
	@bash tools/install.sh

test: install
	$(PY) -m pytest tests -q -n $(PYTEST_WORKERS) --dist loadfile --durations=15

# the suite on the low end of setup.cfg's mmengine range, put in front of the installed one
MMENGINE_LOW ?= 0.10.6
test-mmengine-low: install
	test -d $(VENV)/mmengine-$(MMENGINE_LOW) || $(PY) -m pip install --quiet --no-deps \
		--target $(VENV)/mmengine-$(MMENGINE_LOW) mmengine==$(MMENGINE_LOW)
	PYTHONPATH=$(VENV)/mmengine-$(MMENGINE_LOW) $(PY) -m pytest tests -q -n $(PYTEST_WORKERS) \
		--dist loadfile

# the suite on the low end of setup.cfg's torch range, in a venv of its own (tools/install.sh
# with PECO_TORCH): PyPI has only torch's CUDA wheels, so it downloads a few GB once
TORCH_LOW ?= torch==2.11.0 torchvision==0.26.0
TORCH_LOW_VENV ?= .venv-torch-low
test-torch-low:
	PECO_VENV=$(TORCH_LOW_VENV) PECO_TORCH="$(TORCH_LOW)" bash tools/install.sh
	$(TORCH_LOW_VENV)/bin/python -m pytest tests -q -n $(PYTEST_WORKERS) --dist loadfile

demo: install
	$(PY) tools/study.py --profile demo --work-dir $(WORK_DIR)

# one Markdown report for a GPU machine (tools/benchmark.py gpu-check; its CPU part elsewhere)
gpu-check: install
	$(PY) tools/benchmark.py gpu-check --report gpu_check.md $(if $(TOKENIZER),--tokenizer $(TOKENIZER))

lint: install
	$(PY) -m flake8 peco_mm tools tests configs

clean:
	rm -rf work_dirs .pytest_cache
