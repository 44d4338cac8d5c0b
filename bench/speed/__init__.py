"""``mhab speed``: the attention core and the task models timed apart from training
(``benchmark``), and the tables and findings read from its CSV (``targets``).
(Which rooms it may import: pyproject.toml, [tool.importlinter].)
"""
