"""Errors written for people: what happened, why, and the fix, as one paragraph."""

from __future__ import annotations


class NcuflowError(Exception):
    """Base of every error ncuflow raises on purpose.

    The CLI prints ``str(error)`` and exits non-zero without a traceback, so the
    message must stand on its own: what happened, why it happened, and what to do.
    """

    exit_code = 2

    def __init__(self, what: str, why: str = "", fix: str = "") -> None:
        self.what = what.strip()
        self.why = why.strip()
        self.fix = fix.strip()
        super().__init__(self.paragraph())

    def __reduce__(self) -> tuple[object, ...]:
        # Pickles with its attributes, whatever the subclass's __init__ takes: errors travel
        # back from worker processes (reading) and Ray tasks (sweeps).
        return (_rebuild_error, (type(self), dict(self.__dict__)))

    def replace_in_text(self, old: str, new: str) -> None:
        """Replace ``old`` by ``new`` in what, why and fix (e.g. a path the file moved from)."""
        self.what, self.why, self.fix = (part.replace(old, new) for part in (self.what, self.why, self.fix))
        Exception.__init__(self, self.paragraph())

    def paragraph(self) -> str:
        parts = [self.what]
        if self.why:
            parts.append(self.why)
        if self.fix:
            parts.append(self.fix)
        return " ".join(p if p.endswith((".", "!", "?", ":")) else p + "." for p in parts)


def _rebuild_error(cls: type[NcuflowError], state: dict[str, object]) -> NcuflowError:
    error = cls.__new__(cls)
    error.__dict__.update(state)
    Exception.__init__(error, error.paragraph())
    return error


class ReportError(NcuflowError):
    """A file that should be an Nsight Compute report cannot be used."""


class NoReportsFound(NcuflowError):
    """A path given on the command line holds no Nsight Compute report."""


class UsageError(NcuflowError):
    """An option or argument combination that cannot work."""


class NcuflowWarning(UserWarning):
    """A warning about the user's input that the CLI prints as one ``ncuflow: warning:`` line
    on stderr (once per message), never as Python's two-line warning with a source path."""


class DamagedRunWarning(NcuflowWarning):
    """Issued once per damaged run a store reader skips (the CLI prints it as one line). Here,
    not in ``ncuflow.store``, so that the CLI shows it without importing the store."""
