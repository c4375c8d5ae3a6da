"""One module per reproduced experiment; each defines `EXPERIMENT` (see reproduce.experiment)."""
