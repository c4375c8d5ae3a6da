"""Schedule templates: per compute pattern, a space of knobs and a heuristic default."""

from __future__ import annotations

from autorelay.schedule.templates.base import (
    Template,
    check_in_space,
    template_choices,
    template_for,
    templates,
)

__all__ = ["Template", "check_in_space", "template_choices", "template_for", "templates"]
