# orch: two commands to get going.  `make demo` runs the demo playbook on the embedded hosts,
# `make test` runs the whole test suite (installing openssh-server when it is missing).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: venv install demo test lint sshd clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv install: $(STAMP)

demo: $(STAMP)
	$(BIN)/orch run playbooks/demo.yaml

sshd:
	@if command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing openssh-server (needed by the integration tests)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null; \
	else \
		echo "sshd is missing: install openssh-server (e.g. 'sudo apt-get install openssh-server'); the integration tests need it" >&2; exit 1; \
	fi

test: $(STAMP) sshd
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check orchestrator tests

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
