# Every target installs what it needs first: `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# An editable install writes no bytecode, and where PYTHONDONTWRITEBYTECODE is set (this
# machine's CI) Python never caches it: every `gradebox` call would compile its own modules
# again (~25 ms of each `gradebox exec`). Compiled here, as installing a wheel does.
COMPILE = $(BIN)/python -m compileall -q src/gradebox

.PHONY: install images demo test test-fast bench lint schemas clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,ray]'
	$(COMPILE)
	touch $(STAMP)

install: $(STAMP)

# The base image is bootstrapped with debootstrap from the host's apt mirror (no registry).
# Not root: mmdebstrap --mode=unshare builds it (the prerequisite line: docs/non-root.md).
# crun, from the distribution like debootstrap: the oci backend's faster runtime (runc stays
# the fallback `auto` picks where crun is missing).
images: $(STAMP)
	@[ "$$(id -u)" != 0 ] || command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null)
	@[ "$$(id -u)" != 0 ] || command -v crun >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq crun >/dev/null)
	$(BIN)/gradebox images build
	[ -f images/images.lock.json ] || $(BIN)/gradebox images lock

# Exit 1 means the run completed and some tests failed: the quickstart fails some on purpose.
demo: images
	$(BIN)/gradebox run examples/quickstart/suite.yaml --out gradebox-runs/demo \
	  --report gradebox-runs/demo/report.html; \
	  rc=$$?; [ $$rc -le 1 ] || exit $$rc
	@echo "report: $(CURDIR)/gradebox-runs/demo/report.html"

# As root, the tests also run a subset again as an unprivileged docker-group user they create
# (tests/docker/test_nonroot.py): that user's rootless runc maps ids with newuidmap (uidmap).
# Three workers, a test file each at a time (--dist loadfile keeps a file's fixtures together).
# The report's tests (tests/browser/) drive Debian's chromium-headless-shell with Playwright
# (pinned in the dev extra to the version that speaks to it): no browser download.
test: images
	@[ "$$(id -u)" != 0 ] || command -v newuidmap >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq uidmap >/dev/null)
	@[ "$$(id -u)" != 0 ] || dpkg-query -W -f='$${Status}' chromium-headless-shell 2>/dev/null | grep -q "ok installed" || \
	  (apt-get update -qq && \
	   DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell >/dev/null)
	$(COMPILE)
	$(BIN)/pytest -q -n 3 --dist loadfile
	@$(MAKE) --no-print-directory guest-in-test

# The cgroup v2 guest after the suite, where the machine can run one (docs/guest.md): 45 min
# at most, less when $$GRADEBOX_GUEST_DEADLINE (epoch seconds: .ci/run's 90 min) is nearer;
# GUEST=skip leaves it out. Every skip is said in one line.
.PHONY: guest-in-test
guest-in-test:
	@if [ "$(GUEST)" = skip ]; then echo "guest: skipped (GUEST=skip)"; exit 0; fi; \
	  m=45; if [ -n "$$GRADEBOX_GUEST_DEADLINE" ]; then \
	    left=$$(( ($$GRADEBOX_GUEST_DEADLINE - $$(date +%s)) / 60 )); m=$$(( left < 45 ? left : 45 )); fi; \
	  if [ $$m -lt 25 ]; then echo "guest: skipped: $$m min left before the deadline, it needs 25"; exit 0; fi; \
	  echo "guest: the cgroup v2 guest, $$m min at most"; \
	  $(MAKE) --no-print-directory guest GUEST_ARGS="--timeout $$m $(GUEST_ARGS)"

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not docker"

# The peer (epicbox 1.1.0) needs docker<7, urllib3<2, requests<2.32: a venv of its own.
bench/.venv-epicbox/.installed:
	$(PYTHON) -m venv bench/.venv-epicbox
	bench/.venv-epicbox/bin/pip install -q 'epicbox==1.1.0' 'docker<7' 'urllib3<2' 'requests<2.32'
	touch $@

bench: images bench/.venv-epicbox/.installed
	$(COMPILE)
	$(BIN)/python bench/run.py

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

# The JSON Schemas, and the hardening table of docs/security.md (both made from the code).
schemas: $(STAMP)
	$(BIN)/gradebox schemas schemas
	$(BIN)/python -c 'from gradebox.sandbox.defaults import write_hardening_table as w; w("docs/security.md")'

clean:
	rm -rf $(VENV) build *.egg-info

# The cgroup v2 guest (docs/guest.md): a Debian 12 VM on pure cgroup v2 under qemu's TCG, no
# network, that runs named test subsets on every isolated backend (tests/guest/v2guest.py; as
# root it installs qemu and mmdebstrap with apt). GUEST_ARGS: its options (--subset, --timeout,
# --bench, --keep-image). Where this machine cannot run it, one line says why (exit 77): skipped.
.PHONY: guest
guest: images
	@$(BIN)/python tests/guest/v2guest.py $(GUEST_ARGS); rc=$$?; \
	  if [ $$rc = 77 ]; then echo "make guest: skipped (see the line above)"; exit 0; fi; exit $$rc
