"""Running one experiment: the engine's training loop and its final measurements, timing,
FLOPs and memory, precision and compilation, run loggers, the per-run lock, the environment
a run records, and attention distances.

Imports: ``bench.errors``, ``bench.records``, ``bench.task`` and ``models``.
"""
