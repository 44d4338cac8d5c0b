"""Tuning: ``mhab tune`` gives every model family the same hyper-parameter search (one Optuna
study per family, the same trials, sampler and space), then reruns each family's best trial
with several seeds on test. The report reads what it leaves in run records, never this
package. (Which rooms it may import: pyproject.toml, [tool.importlinter].)"""
