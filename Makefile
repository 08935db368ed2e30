# grounded_planner: `make demo` runs the main job, `make test` the test suite. Both set up first.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test bench clean

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/bin/grounded-planner demo

test: setup
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(PY) -m pytest $(PYTEST_ARGS)

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf build .pytest_cache
