"""``mhab speed``: the attention core and the task models timed apart from training
(``benchmark``), and the tables and findings read from its CSV (``analysis``).

Imports: ``bench.errors``, ``bench.records``, ``bench.setup``, ``bench.run`` and ``models``.
"""
