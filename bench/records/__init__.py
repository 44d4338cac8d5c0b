"""Run records and the results table: the record's type and columns, reading and writing
records, the table every command and the report read, atomic writes, attention examples.
(Which rooms it may import: pyproject.toml, [tool.importlinter].)
"""
