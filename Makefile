# 분산 학습 Deep Dive — build, serve, test, refresh results.
#   make serve   create .venv, install everything, build once and serve on http://127.0.0.1:8000/ (rebuilds on
#                any change under docs/, snippets/, gpu_runs/results/, scripts/ or in mkdocs.yml)
#   make test    same set-up, then the whole test suite (build, distributed runs, browser)
#   make pdf     the book as A4 PDFs (per chapter and whole, students' and instructors' editions) in site/pdf/
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch 2.13.0 is the newest CPU build; on a CUDA machine:
#   make setup TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
# (a CUDA version no newer than the one `nvidia-smi` prints). The torch stamp is named after a hash of
# TORCH_SPEC, so `make setup` with another spec reinstalls torch (and what was built against it).
TORCH_SPEC ?= torch==2.13.0
DEEPSPEED_SPEC ?= deepspeed==0.19.8
TORCH_STAMP := $(VENV)/.torch-$(shell printf '%s' '$(TORCH_SPEC)' | { sha256sum 2>/dev/null || shasum -a 256; } | cut -c1-16)
export NO_MKDOCS_2_WARNING := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup serve build test test-fast runs gpu-runs lock browser-deps clean bench pdf

# torch, from TORCH_SPEC. Another spec installed before (another .torch-* stamp): uninstall that torch
# first, since pip counts 2.13.0+cpu as satisfying torch==2.13.0 and would keep the CPU build; deepspeed
# goes with it (it is built against the torch it was installed with) and $(STAMP) reinstalls it.
$(TORCH_STAMP):
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	if ls $(VENV)/.torch-* >/dev/null 2>&1; then $(BIN)/pip uninstall -y -q torch deepspeed; rm -f $(VENV)/.torch-*; fi
	$(BIN)/pip install -q $(TORCH_SPEC)
	printf '%s\n' '$(TORCH_SPEC)' > $@

# DeepSpeed's CPU accelerator JIT-compiles two C++ ops on first use, about 30 s each on 2 cores: build them
# at set-up so that no test or run pays for it. A failed build is printed in full (the traceback holds the
# compiler's output) and does not stop the set-up; what needs the op fails with the same error until it builds:
#   ShareMemCommBuilder: deepspeed.comm builds it when it starts on the CPU accelerator (deepspeed 0.19.8
#     comm/torch.py build_shm_op, TorchBackend.__init__), so every DeepSpeed program on CPU: zero_bench,
#     offload_bench, deepspeed_pipe, cpu_allreduce_gap. On CUDA the builder does not exist (None): not needed.
#   PinMemoryBuilder: only under DS_PIN_MEMORY_BACKEND=native (utils/pin_memory.py), which no gpu_runs
#     program sets: on CPU and on CUDA, a failure here affects nothing the book runs.
define DS_OPS_PY
import sys, traceback
from deepspeed.accelerator import get_accelerator
acc = get_accelerator()
needed_by = {"ShareMemCommBuilder": "every DeepSpeed program on CPU (zero_bench, offload_bench, deepspeed_pipe, "
                                    "cpu_allreduce_gap: deepspeed.comm builds this op when it starts)",
             "PinMemoryBuilder": "only runs with DS_PIN_MEMORY_BACKEND=native (no gpu_runs program sets it)"}
for name, who in needed_by.items():
    builder = acc.create_op_builder(name)
    if builder is None:
        print(f"DeepSpeed op {name}: not used by the {acc.device_name()} accelerator")
        continue
    try:
        builder.load()
        print(f"DeepSpeed op {name}: built")
    except Exception:
        traceback.print_exc()
        print(f"WARNING: DeepSpeed op {name} failed to build (above). Set-up goes on; {who} will fail "
              "until it builds (a C++ compiler and ninja are needed).", file=sys.stderr)
endef
export DS_OPS_PY

$(STAMP): $(TORCH_STAMP) requirements.lock pyproject.toml package.json package-lock.json
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.lock
	DS_BUILD_OPS=0 $(BIN)/pip install -q --no-build-isolation $(DEEPSPEED_SPEC)
	$(BIN)/python -c "$$DS_OPS_PY"
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

# the book on paper (scripts/pdf.py): a strict build into site/, then one A4 PDF per chapter and one for the whole
# book, students' edition (no exercise solutions) and instructors' (solutions open), printed by Chromium into
# site/pdf/ with manifest.json; the landing page links them. Not part of build or test: about 15 min on this 2-core machine
# (README.md, "종이로 읽기").
pdf: setup browser-deps
	$(BIN)/mkdocs build --strict
	$(BIN)/python scripts/pdf.py site

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
