"""The papers' reported figures: every experiment named is one the registry knows, and every figure
cites where in its paper it is stated."""

from __future__ import annotations

import re

from reproduce.papers import REFERENCES, REPORTED, section
from reproduce.registry import MODULES

_PLACE = re.compile(r"\b(Sec\.|Section|Fig\.|Figure|Table)\s*\d", re.IGNORECASE)


def test_keys_are_experiments():
    assert REPORTED, "no paper figures recorded"
    assert set(REPORTED) <= set(MODULES)
    assert set(REFERENCES) <= set(MODULES)


def test_every_figure_is_cited_to_a_place_in_a_paper():
    for name, rows in REPORTED.items():
        assert rows, name
        for r in rows:
            assert r.quantity.strip() and r.value.strip(), (name, r)
            assert _PLACE.search(r.source), (name, r.source)
            assert "|" not in f"{r.quantity}{r.value}{r.source}{r.ours}", (name, r)  # Markdown cells


def test_every_experiment_with_figures_has_its_citation():
    for name in REPORTED:
        assert REFERENCES.get(name, "").strip(), name


def test_section_renders_a_table_row_per_figure():
    for name, rows in REPORTED.items():
        md = section(name)
        assert md.startswith("## What the paper reports")
        assert sum(line.startswith("| ") for line in md.splitlines()) == len(rows) + 1  # + header
    assert section("no_such_experiment") == ""
