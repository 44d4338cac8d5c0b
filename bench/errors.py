"""User-facing errors: one line that says what is wrong and how to fix it."""


class BenchError(Exception):
    """A mistake in the user's input (config, data, paths). The CLI prints it as one line and
    exits non-zero; it is never shown as a traceback."""


class RunFailed(Exception):
    """A run started and then failed (NaN loss, crash); its record says why."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, a scheduler's time limit): stops like Ctrl-C, so the run that was cut
    short gets an ``interrupted`` record and finished runs stay as they are."""


class NotWritable(BenchError):
    """A file cannot be written where it belongs (a read-only or missing folder, a full disk)."""
