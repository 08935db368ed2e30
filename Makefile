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
# The whole replay graph launched from its launch file, probed from the pytest process: in two clean-clone CI runs it
# failed late in the big process (a plan request unanswered for 90 s; a logger that saw no plan) and passed alone.
# A launch is its own set of processes on a robot too; the cause in the big process is not yet found.
LAUNCH_TESTS := test/test_ros_launch_real.py test/test_console_launch.py
OWN_PROCESS_TESTS := $(BUS_TESTS) $(LAUNCH_TESTS)
TEST_ENV := OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

test: setup
ifeq ($(strip $(PYTEST_ARGS)),)
	$(TEST_ENV) $(PY) -m pytest $(addprefix --ignore=,$(OWN_PROCESS_TESTS))
	$(TEST_ENV) $(PY) -m pytest $(LAUNCH_TESTS)
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
