"""grounded_planner: act on spatially grounded plans from vision-language models."""

import os as _os

# Our nodes run several callbacks at once (multi-threaded executors, planner worker threads) on small
# arrays; OpenBLAS's own thread pool on top of that only oversubscribes the cores, and we have seen a
# node spin at 100% per core inside a small matrix product under load. One BLAS thread per caller
# unless the user asks otherwise (this must be set before numpy loads, hence here).
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"
