# 분산 학습 Deep Dive — build, serve, test, refresh results.
#   make serve   create .venv, install everything, build once and serve on http://127.0.0.1:8000/ (rebuilds on
#                any change under docs/, snippets/, gpu_runs/results/, scripts/ or in mkdocs.yml)
#   make test    same set-up, then the whole test suite (build, distributed runs, browser)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch 2.13.0 is the newest CPU build; on a CUDA machine: make setup TORCH_SPEC="torch==2.13.0 --index-url <your CUDA wheel index>"
TORCH_SPEC ?= torch==2.13.0
DEEPSPEED_SPEC ?= deepspeed==0.19.8
export NO_MKDOCS_2_WARNING := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup serve build test test-fast runs gpu-runs lock browser-deps clean bench

$(STAMP): requirements.lock pyproject.toml package.json package-lock.json
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q $(TORCH_SPEC)
	$(BIN)/pip install -q -r requirements.lock
	DS_BUILD_OPS=0 $(BIN)/pip install -q --no-build-isolation $(DEEPSPEED_SPEC)
	# DeepSpeed's CPU backend JIT-compiles its shared-memory comm op and (for offload) its pinned-memory
	# op on first use, about 30 s each on 2 cores; build them now so that no test or run pays for it
	$(BIN)/python -c "from deepspeed.accelerator import get_accelerator as g; [b.load() for b in map(g().create_op_builder, ('ShareMemCommBuilder', 'PinMemoryBuilder')) if b]" 2>&1 | tail -n 1
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	npm ci --no-audit --no-fund --loglevel=error
	touch $(STAMP)

setup: $(STAMP)

# Chromium and fonts for the browser tests and screenshots (Debian packages; installed when root).
browser-deps:
	@if [ -x /usr/bin/chromium ] && fc-list | grep -qi "Noto Sans CJK" && fc-list | grep -qi "Noto Color Emoji"; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk fonts-noto-color-emoji >/dev/null; \
	else echo "browser tests need Debian's chromium, fonts-noto-cjk and fonts-noto-color-emoji (they will be skipped)"; fi

build: setup
	$(BIN)/mkdocs build --strict

# One build, then serve: mkdocs serve builds the site itself (not strict, so that a typo while writing
# shows in the log instead of stopping the server). Cell outputs come from the build cache (.cache/book/).
# --dirty: after an edit only the pages that changed are rebuilt, and a page whose cells read an edited
# snippet or results file counts as changed (scripts/hooks.py); the search index then covers those pages.
SERVE_ADDR ?= 127.0.0.1:8000
serve: setup
	@echo "building once, then serving at http://$(SERVE_ADDR)/ (Ctrl-C stops)"
	$(BIN)/mkdocs serve --dirty --no-strict -a $(SERVE_ADDR) -w snippets -w gpu_runs/results -w scripts

# the suite's site build is cold (BOOK_CACHE=0): its time budget is for every cell and lab executed
test: setup browser-deps
	BOOK_CACHE=0 $(BIN)/python -m pytest

# everything but the whole-site build and the browser (seconds instead of minutes)
test-fast: setup
	$(BIN)/python -m pytest -m "not build and not browser"

# regenerate every committed CPU result with torchrun on this machine
runs: setup
	$(BIN)/python scripts/runs.py

# the author-loop and build figures (build/build-time.txt) and the page weight over the wire (gzip)
bench: setup browser-deps
	$(BIN)/python scripts/bench_build.py
	BOOK_CACHE=0 $(BIN)/mkdocs build --strict -q -d build/site
	$(BIN)/python scripts/page_weight.py build/site

lock: setup
	{ sed -n '1,4p' requirements.lock; $(BIN)/pip freeze --exclude-editable | grep -v '^torch==\|^deepspeed==\|^-e '; } > requirements.lock.new
	mv requirements.lock.new requirements.lock

clean:
	rm -rf site build test-artifacts .pytest_cache

gpu-runs: setup  ## every GPU result that fits the visible GPUs, <= 10 min on one H200 (--dry-run: plan only)
	$(BIN)/python scripts/runs.py --gpu
