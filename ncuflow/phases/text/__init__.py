"""``ncuflow phases`` as text: a ``PhasesReport`` rendered for the terminal. Pure.

``tables`` renders the runs (one table per file, the reconciliation, the notes);
``session`` a long log's summary and what its server refused; ``shapes`` the shapes a log's
runs served. Every value from a log goes through ``safe_text`` before lines are joined."""

from ncuflow.phases.text.tables import render_text

__all__ = ["render_text"]
