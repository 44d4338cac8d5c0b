"""The report: findings and verdicts computed from records (``analysis``, ``stats``), the
sections that draw them, rendering to Markdown and HTML, and publishing beside MLflow runs.

Imports: ``bench.errors``, ``bench.records`` and ``bench.speed.analysis`` (speed tables).
"""
