"""Test-wide isolation: no test reads or writes the user's default tuning log.

Commands run without `--db` open `$AUTORELAY_DB`, else a file in the user's data directory; a test
must not see what another checkout (or an older schema) left there, nor leave anything behind. So
every session gets its own empty default log, which child processes inherit through the
environment. A test that names its own `--db` is unaffected.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_default_tuning_log(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("default_log") / "tuning.sqlite"
    old = os.environ.get("AUTORELAY_DB")
    os.environ["AUTORELAY_DB"] = f"sqlite:///{path}"
    yield
    if old is None:
        os.environ.pop("AUTORELAY_DB", None)
    else:
        os.environ["AUTORELAY_DB"] = old
