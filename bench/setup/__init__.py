"""From config to built objects: composing ``conf/`` with overrides, the settings classes and
the schema check, and the one build path (task, splits, model) for ``run`` and ``speed``.

Imports: ``bench.errors``, ``bench.records``, ``bench.task``, ``bench.run`` (its checks of
device, dtype and compile) and ``models``.
"""

from bench.setup import task_models  # noqa: F401, E402 - registers ${task_model:...}, which conf/model reads
