"""The SGEMM depth study: GloNet vs ResNet-MLP vs MLP on UCI SGEMM (``python -m bench.sgemm``).

* cli.py: the command line (its flags and what each suite does are in that module's docstring) and ``main``;
* study.py: the suite name, model families, depths and the seed study's figures;
* session.py: one training session (session folder, checkpoints, ``--resume``);
* report.py: a session's metrics files and plots, the depth tables, the step-time table;
* suites.py: the ``depth`` and ``steptime`` suites and the loss-agreement check.

The names below are what tests and other bench modules use (``from bench import sgemm``)."""
from .cli import (REPO, SMOKE, SMOKE_INTERPRETER, SMOKE_MODEL, TRAINING_RESULTS, data_path, estimate_s, main,
                  parse_args)
from .report import depth_tables, steptime_lines, suite_report
from .session import train_session
from .study import DEPTHS, SEED_MSE, SEED_STEP_MS, SEED_TIME_S, STUDY_MODELS, SUITE, family_depths
from .suites import (CHAOS_FACTOR, LOSS_AGREEMENT, batch_starts, loss_agreement, rel_diff, step_fns, suite_depth,
                     suite_steptime)

__all__ = [
    "REPO", "SMOKE", "SMOKE_INTERPRETER", "SMOKE_MODEL", "TRAINING_RESULTS", "data_path", "estimate_s", "main",
    "parse_args", "depth_tables", "steptime_lines", "suite_report", "train_session", "DEPTHS", "SEED_MSE",
    "SEED_STEP_MS", "SEED_TIME_S", "STUDY_MODELS", "SUITE", "family_depths", "CHAOS_FACTOR", "LOSS_AGREEMENT",
    "batch_starts", "loss_agreement", "rel_diff", "step_fns", "suite_depth", "suite_steptime",
]
