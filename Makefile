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
# franky-sim's arm, stopped by a cancel, must stand still within the shipped 1 s stop bound of wall clock; in one
# clean-clone CI run (2026-12-03, at 24 % of the big process) the simulated braking outlasted it and the backend
# rightly reported a fault. The simulator is a process of its own either way; this keeps the earlier tests' leftover
# threads off the 2 cores while it brakes (a hypothesis: one failure in four runs that day, not yet reproduced).
ARM_SIM_TESTS := test/test_execution_franky.py
# The whole replay graph launched from its launch file, probed from the pytest process: in two clean-clone CI runs it
# failed late in the big process (a plan request unanswered for 90 s; a logger that saw no plan) and passed alone.
# A launch is its own set of processes on a robot too; the cause in the big process is not yet found.
LAUNCH_TESTS := test/test_ros_launch_real.py test/test_console_launch.py
OWN_PROCESS_TESTS := $(BUS_TESTS) $(ARM_SIM_TESTS) $(LAUNCH_TESTS)
TEST_ENV := OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

test: setup
ifeq ($(strip $(PYTEST_ARGS)),)
	$(TEST_ENV) $(PY) -m pytest $(addprefix --ignore=,$(OWN_PROCESS_TESTS))
	$(TEST_ENV) $(PY) -m pytest $(LAUNCH_TESTS)
	$(TEST_ENV) $(PY) -m pytest $(BUS_TESTS)
	$(TEST_ENV) $(PY) -m pytest $(ARM_SIM_TESTS)
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
