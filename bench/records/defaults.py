"""Defaults that several rooms read where a record or config leaves a key out, each kept
once here (records is the lowest room that needs them). ``conf/config.yaml`` states the same
defaults for a composed run."""

DEFAULT_SCALE = "s"  # the model size every task's ``models`` settings describe
FULL_TRAINING_SET = 1.0  # ``task.train_fraction``: the whole training split
