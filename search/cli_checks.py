"""Checks of the command line's paths and names, made before any work starts: a build of a large
model takes minutes, and a mistyped output path or pipeline name should not cost them (nor be
reported in the words of `errno`, or of an internal list)."""

from __future__ import annotations

import argparse
import os

# The `--pipeline` values that are not pass pipelines: the command line resolves them itself.
CHOSEN_PIPELINES = ("auto", "plan")


def pipeline_name(text: str) -> str:
    """An argparse type for `--pipeline`: a named pass pipeline, `auto` or `plan`."""
    from autorelay.transform.pipelines import PIPELINES

    if text in CHOSEN_PIPELINES or text in PIPELINES:
        return text
    named = [p for p in PIPELINES if p != "tune"]  # `tune` is only an old name, kept for old logs
    raise argparse.ArgumentTypeError(f"unknown pipeline {text!r}; choose auto or plan "
                                     f"(searched), or a pass pipeline: {', '.join(named)}")


pipeline_name.__name__ = "pipeline"  # argparse names the type in some messages


def kernel_cache_folder(text: str) -> str:
    """An argparse type for `--kernel-cache`: a folder, created when missing. The cache itself is
    quietly best-effort (a kernel it cannot file is compiled again next time), so a path that can
    never hold it is refused here, where the user asked for it."""
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder")
    try:
        os.makedirs(text, exist_ok=True)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot create the folder {text}: {e.strerror}") from None
    if not os.access(text, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"the folder {text} cannot be written to")
    return text


kernel_cache_folder.__name__ = "folder"


def check_output_file(path: str) -> None:
    """Raises ValueError when an executable could not be saved at `path`: it names a folder, or its
    folder is missing or read-only. Checked before the build, not after it."""
    if os.path.isdir(path):
        raise ValueError(f"--output: {path} is a folder; give the file to write")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"--output: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"--output: the folder {folder} cannot be written to")


__all__ = ["CHOSEN_PIPELINES", "check_output_file", "kernel_cache_folder", "pipeline_name"]
