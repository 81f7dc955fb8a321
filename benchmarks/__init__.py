"""orch's benchmarks of itself: one module per benchmark, `make bench` for all (see README.md)."""
