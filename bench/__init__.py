"""mha-bench's harness: everything between a config and a report.

The rooms and what each holds. Their order, and which may import which, is kept in one place:
the contracts in pyproject.toml's ``[tool.importlinter]``, checked by ``lint-imports`` and the
tests.

- ``bench.errors``: the one-line error types every command turns into a message.
- ``bench.records``: the run record, its columns, the results table, atomic writes.
- ``bench.data``: dataset files and checksums, downloads, caches, audio and image readers,
  user folders, offline speech synthesis, length-bucketed batching.
- ``bench.task``: the contract between a task adapter (``tasks/``) and the engine.
- ``bench.run``: the engine (training loop, final measurements), timing and memory,
  precision and compilation, loggers, locks, the environment, attention distances.
- ``bench.setup``: composing configs, checking them against their schema, building a run.
- ``bench.speed``: ``mhab speed``, the throughput benchmark, and its targets.
- ``bench.report``: findings and statistics from records, the report's sections, rendering,
  publishing.
- ``bench.tune``: ``mhab tune``: plans, search spaces, Optuna studies, finals.
- top: ``experiment`` (one run), ``estimate`` (a sweep's cost), ``api`` (Python entry points)
  and ``cli`` (the ``mhab`` command).
"""
