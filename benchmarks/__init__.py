"""The benchmark harness: ``bench.py`` (``make bench``: every row, ratios in one run), its row
modules ``rows_*.py`` over ``harness.py`` and ``bench_data.py``, the retune micro-benchmark, the
scale benchmark and ``vs_qmd.py`` (qmdlab against qmd on one machine). Each script runs as
``python benchmarks/NAME.py``; the library never imports this package."""
