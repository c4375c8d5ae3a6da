"""`autorelay reproduce`: the published experiments of Relay and AutoTVM, one command each.

    autorelay reproduce --list
    autorelay reproduce rnns --quick            # measures, stores rows in the log, writes CSV/MD/PNG
    autorelay reproduce rnns --quick --replot   # redraws from the log, measures nothing

An experiment is a list of units measured one by one into the tuning log (see `experiment.py`);
`runner.py` skips the units the log already has, so reruns and interrupted runs cost nothing twice.
"""

from __future__ import annotations

from .experiment import Context, Experiment, Report, Row, Unit
from .registry import experiments, get
from .runner import ReproduceError, RunSummary, run_experiment

__all__ = ["Context", "Experiment", "Report", "ReproduceError", "Row", "RunSummary", "Unit", "experiments",
           "get", "run_experiment"]
