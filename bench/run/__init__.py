"""Running one experiment: the engine's training loop and its final measurements, timing,
FLOPs and memory, precision and compilation, run loggers, the per-run lock, the environment
a run records, and attention distances. (Which rooms it may import: pyproject.toml,
[tool.importlinter].)
"""
