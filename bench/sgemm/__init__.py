"""The SGEMM depth study (``python -m bench.sgemm``); the command and its flags: :mod:`bench.sgemm.cli`."""
from .cli import (  # noqa: F401  (what tests and other bench modules use)
    SMOKE_MODEL, SUITE, _step_fns, batch_starts, data_path, loss_agreement, main, parse_args, rel_diff,
    steptime_lines, suite_depth, suite_report, suite_steptime, train_session,
)
