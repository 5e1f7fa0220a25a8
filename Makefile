# Everything runs from a project-local virtual environment that `make` creates itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CHECK_TESTS := tests/test_breaker.py tests/test_cooldown.py tests/test_lockout.py \
	tests/test_herd.py tests/test_classify.py tests/test_consequences.py tests/test_event_bus.py \
	tests/test_router.py tests/test_strategies.py tests/test_strategy_quiet.py \
	tests/test_strategies_hostile.py tests/test_properties.py tests/test_quick_probes.py \
	tests/test_every_key_cooling.py tests/test_in_flight.py tests/test_sim_trace.py \
	tests/test_trace_pins.py

.PHONY: demo test check lint browser prometheus bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/omniroute-tui --scenario demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# The browser test drives the distribution's Chromium: installed here where that can be
# done (as root, with apt-get); elsewhere the test says why it is skipped.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && { apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; }; }; } || echo "no Chromium, and no way to install it here: the browser test will be skipped"

# The metrics tests check the exposition with Debian's promtool (and the alert rules with
# its server, their routing with Alertmanager): installed the same way; elsewhere those
# tests say why they are skipped.
prometheus:
	@{ command -v promtool && command -v amtool; } >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && { apt-get install -y -q prometheus prometheus-alertmanager >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q prometheus prometheus-alertmanager >/dev/null 2>&1; }; }; } || echo "no promtool or amtool, and no way to install them here: the tests that need Prometheus or Alertmanager will be skipped"

# the whole suite, on every core (pytest-xdist; a test that idles on a subprocess or a
# server leaves its core to the next one, so workers steal work from each other)
test: lint browser prometheus
	$(BIN)/python -m pytest -n auto --dist worksteal

# the inner loop: lint, types, and the engine's and the router's tests
check: lint
	$(BIN)/python -m pytest -n auto --dist worksteal $(CHECK_TESTS)

bench: $(STAMP)
	$(BIN)/python bench/route_decision.py
	$(BIN)/python bench/sim_throughput.py
	$(BIN)/python bench/console_refresh.py
	$(BIN)/python bench/gateway_overhead.py
	$(BIN)/python bench/translation_overhead.py
	$(BIN)/python bench/metrics_scrape.py
	$(BIN)/python bench/fleet.py
	$(BIN)/python bench/reports.py
	$(BIN)/python bench/reload.py
	$(BIN)/python bench/slow_clients.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
