"""vgpu benchmarks (docs/design.md section 9): ``make bench`` / ``python3 -m bench``.

Every figure is a ratio against a floor measured in the same run; nothing here
asserts a time. ``BENCH_QUICK=1`` runs each section with a few rounds only (the
smoke test uses it). See docs/bench.md.
"""
