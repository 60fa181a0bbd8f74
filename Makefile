# Set-up is part of every target: a fresh clone needs only `make run` or `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONSTRAINTS := constraints.txt
# setuptools warns that a folder named like the package sits in the working directory: here
# that folder is the package (quorumlog/, with log/, raft/, ... mapped under it).
PIP_INSTALL := PYTHONWARNINGS="ignore:Editable installation:UserWarning" $(BIN)/python -m pip install

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Runtime only (what `make run` needs).
$(VENV)/.base: $(BIN)/python pyproject.toml $(CONSTRAINTS)
	$(PIP_INSTALL) -q -c $(CONSTRAINTS) -e .
	touch $@

# Everything, extras included (what `make test` needs).
$(VENV)/.full: $(BIN)/python pyproject.toml $(CONSTRAINTS)
	$(PIP_INSTALL) -q -c $(CONSTRAINTS) -e '.[dev,spark]'
	touch $@ $(VENV)/.base

# The browser tests drive Debian's Chromium (Playwright's own browser download is not
# reachable here); without it they are skipped, saying why.
$(VENV)/.chromium:
	@if ! command -v chromium >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null \
	      || echo "could not install chromium: the browser tests will be skipped"; \
	  else \
	    echo "no chromium, and no apt-get as root to install it: the browser tests will be skipped"; \
	  fi; \
	fi
	@if command -v chromium >/dev/null; then touch $@; fi

# Apache Kafka 4.4's Java programs (broker, tools, clients, Streams, Connect) for the tests
# that drive quorumlog with Kafka's own tools, fetched once from Maven Central by the
# pom in java/kafka/ (no Kafka tarball: registries only) into .cache/kafka-4.4/lib. Without
# java 17+ or mvn, or when the fetch fails, those tests are skipped, saying why; the stamp
# is left out so that the next run tries again.
KAFKA_JAVA := .cache/kafka-4.4
$(KAFKA_JAVA)/.fetched: java/kafka/pom.xml | $(VENV)/.base
	@$(BIN)/python -m quorumlog.bench.kafka_java fetch && mkdir -p $(@D) && touch $@ || true

# The package's folders. Compiled once before a run: where PYTHONDONTWRITEBYTECODE is set
# (as on the CI machines), every process would otherwise compile its ~170 modules from
# source again, ~0.35 s of CPU for each node and command the tests start (hundreds).
SOURCES := quorumlog actors bench consumers controller log membership raft transactions transport
COMPILE := $(BIN)/python -m compileall -q -j 0 $(SOURCES)

run: $(VENV)/.base
	@$(COMPILE)
	$(BIN)/quorumlog dev

# Two workers, one a core: a test that waits on its processes leaves the core to the other.
# (Three kept the cores busier, 1.75 against 1.5 on average, but once Kafka Streams and
# Connect joined the suite they overloaded them: tests that give their processes seconds
# failed.) The tests marked `alone` judge what a fault costs against the time it lasts,
# and run afterwards, one at a time.
test: $(VENV)/.full $(VENV)/.chromium $(KAFKA_JAVA)/.fetched
	@$(COMPILE)
	$(BIN)/python -m pytest -q -n 2 --dist worksteal -m "not alone" --durations=30
	$(BIN)/python -m pytest -q -m alone

lint: $(VENV)/.full
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(VENV)/.base
	$(BIN)/quorumlog bench storage

clean:
	rm -rf $(VENV) .pytest_cache
