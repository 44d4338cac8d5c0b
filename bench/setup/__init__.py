"""From config to built objects: composing ``conf/`` with overrides, the settings classes and
the schema check, the config made typed once (``spec.prepare``), and the one build path (task,
splits, model) for ``run`` and ``speed``. Nothing below this room reads a config. (Which rooms
it may import: pyproject.toml, [tool.importlinter].)
"""

from bench.setup import task_models  # noqa: F401, E402 - registers ${task_model:...}, which conf/model reads
