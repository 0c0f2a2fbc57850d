# Two entry points for a fresh machine (see README):  make up   and   make test
# Everything lands outside the work tree in ~/.cache/kai-dev, keyed by version, so later runs are quick.

SHELL := /bin/bash
PYTHON ?= python3
CACHE ?= $(HOME)/.cache/kai-dev
# The venv is keyed by the dependency list and by this checkout's path (the project is installed editable).
VENV_KEY := $(shell cat pyproject.toml | sha256sum | cut -c1-10)-$(shell echo $(CURDIR) | sha256sum | cut -c1-6)
VENV := $(CACHE)/venv-$(VENV_KEY)
KAI := $(VENV)/bin/kai
PYTEST_ARGS ?=

.PHONY: up down env test unit lint setup binaries image

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@mkdir -p $(CACHE)
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	@touch $@

binaries: setup
	$(KAI) dev build

## Build the product's image from the Dockerfile (buildah on a local Debian base; no registry, no daemon).
image: setup
	$(KAI) dev image

## Set everything up and install the KAI suite with its chart (the seed's helm command) on the local control plane:
## every component a pod on the real node, 4 kwok nodes x 8 GPUs for workloads; prints the exports.
up: binaries
	$(KAI) dev up --suite chart --detach

down: setup
	$(KAI) dev down

## Print the shell exports (KUBECONFIG, PATH with our kubectl) for the running cluster: eval "$$(make -s env)"
env: setup
	@$(KAI) dev env

## Set everything up and run all the tests (unit, integration and end-to-end on the local control plane).
test: binaries
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests ran: failing"; exit 1; fi; exit $$rc

unit: setup
	$(VENV)/bin/python -m pytest tests/unit $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check operators tests e2e bench
	$(VENV)/bin/mypy operators/core operators/scheduler
	$(VENV)/bin/lint-imports
