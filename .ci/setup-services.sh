#!/usr/bin/env bash
# Services the test-suite uses when present (a local PostgreSQL for the tuning log). Written by the
# tuning_db work; a no-op until then.
exit 0
