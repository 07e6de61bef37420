"""What every data loader shares: one-line errors, the search order for a data set, the fetch hint.

Search order for data set ``name`` (MNIST, SGEMM, AG News, CIFAR-10): an explicit path (``--data``), then
``.data/<name>`` in the repository, then ``../shared/data/<name>`` next to the repository.

A command line tool wraps its work in :func:`one_line_errors`: a :class:`DataError` then prints
``error: <message>`` on one line and exits with status 2 (``--debug`` keeps the traceback).
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Callable, Iterator, Sequence

REPO = Path(__file__).resolve().parents[2]


class DataError(ValueError):
    """A missing, corrupt or inconsistent data file; the message is one line and names the file."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).splitlines()))


class DataNotFoundError(DataError):
    """No data where it was looked for; the message lists the paths searched and how to fetch it."""


def default_roots(name: str) -> tuple[Path, Path]:
    """``.data/<name>`` in the repository, then ``../shared/data/<name>`` next to it."""
    return REPO / ".data" / name, REPO.parent / "shared" / "data" / name


def fetch_hint(name: str) -> str:
    return f"get it with `python -m bench.data.fetch {name}` (or the bench module's --download flag)"


def not_found_message(what: str, name: str, searched: Sequence[Path | str]) -> str:
    """``"<what> not found (looked in A, B); get it with ..."``: the one-line not-found error."""
    return (f"{what} not found (looked in {', '.join(str(p) for p in searched)}); {fetch_hint(name)}, "
            f"or pass --data PATH")


def find_dir(name: str, what: str, path: str | Path | None, has_data: Callable[[Path], bool],
             error: type[DataError] = DataNotFoundError) -> Path:
    """The directory to read data set ``name`` from: ``path`` if given (it must exist), else the first
    default root for which ``has_data`` holds. Raises ``error`` (one line, with the fetch hint)."""
    if path is not None:
        p = Path(path)
        if not p.is_dir():
            raise error(f"{what} directory {p} does not exist (--data); {fetch_hint(name)}")
        return p
    roots = default_roots(name)
    for p in roots:
        if p.is_dir() and has_data(p):
            return p
    raise error(not_found_message(what, name, roots))


@contextlib.contextmanager
def one_line_errors(debug: bool = False, errors: tuple[type[BaseException], ...] = (DataError,)
                    ) -> Iterator[None]:
    """For command line tools: an exception of ``errors`` prints ``error: <message>`` on one line to
    stderr and exits with status 2; with ``debug`` it propagates with its traceback."""
    try:
        yield
    except errors as e:
        if debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
