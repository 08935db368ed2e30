# grounded_planner: `make demo` runs the main job, `make test` the test suite. Both set up first.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test bench lint clean

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/bin/grounded-planner demo

# LeRobot's Feetech driver gives a servo ~50 ms to answer. Its tests against the simulated bus pass in a pytest
# process of their own and failed (no status packet, then garbled reads) late in one that ~800 earlier tests had
# filled with threads (rclpy executors, Ray, torch) competing for the GIL; a real arm's driver has its process too.
BUS_TESTS := test/test_execution_lerobot_sim.py test/test_sim_feetech_bus.py
TEST_ENV := OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

test: setup
ifeq ($(strip $(PYTEST_ARGS)),)
	$(TEST_ENV) $(PY) -m pytest $(addprefix --ignore=,$(BUS_TESTS))
	$(TEST_ENV) $(PY) -m pytest $(BUS_TESTS)
else
	$(TEST_ENV) $(PY) -m pytest $(PYTEST_ARGS)
endif

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# ruff (ruff.toml): lint, then check the formatting; neither changes a file (`ruff check --fix`, `ruff format` do)
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf build .pytest_cache
