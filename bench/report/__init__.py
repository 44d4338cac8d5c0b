"""The report: findings and verdicts computed from records (``findings``, ``stats``), the
sections that draw them, rendering to Markdown and HTML, and publishing beside MLflow runs.
(Which rooms it may import: pyproject.toml, [tool.importlinter].)
"""
