"""The model-based tuner's feature vectors, read from and written to the tuning log
(`tuning_db.features`), so that resuming a tune does not lower every logged config again.

Resuming feeds a tuner the task's logged measurements, and warming its cost model feeds it a few
hundred measurements of each nearest workload, every config lowered on the task's shape (about
10 ms each; 35 s for the 33 kernels of a MobileNet-v2 tuned to 800 trials). `search.tune` reads
the task's logged vectors before it feeds a tuner, and logs the vectors the tuner lowered or the
builder reported for measured and transferred configs after each batch. The vectors are filed
under `features.features_version()`, so a changed feature definition or compiler reads none of the
older ones. Tuners without loop-IR features (random, grid, genetic) are left alone.
"""

from __future__ import annotations

from typing import Any

from search.features import features_version
from search.task import Task
from search.tuners.model_based import Featurizer


def _featurizer(tuner: Any) -> Featurizer | None:
    features = getattr(tuner, "features", None)
    return features if isinstance(features, Featurizer) else None


def read_logged_features(db: Any, task: Task, tuner: Any) -> None:
    """Give `tuner` the vectors `db` holds for `task` (once per tuner)."""
    features = _featurizer(tuner)
    if features is not None and not features.read_log:
        features.logged.update(db.features(task.key, str(task.target), features_version()))
        features.read_log = True


def log_features(db: Any, task: Task, tuner: Any) -> int:
    """Log the vectors `tuner` holds that `db` lacks; returns how many."""
    features = _featurizer(tuner)
    fresh = features.take_unlogged() if features is not None else {}
    if fresh:
        db.store_features(task.key, str(task.target), features_version(), fresh)
    return len(fresh)
