"""Equal ctimes (issue 10, item 9; the reasoning is in docs/design.md, "Equal ctimes").

On a filesystem with coarse timestamps (FAT and SMB: 2 s; older kernels: a jiffy) two states of a
file can share a ctime, and with the same size and mtime even a whole signature. A late commit of
an older read must then not replace the newer row, as it did when an equal ctime counted as "the
same or later". A test cannot make this kernel's clock coarse, so the clock is injected: every
signature's times are frozen at one tick (as on a filesystem whose timestamp never moves during
the test), the way `Signature.of` would see them there.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_many_writers import PausedWriter, rows

from ccweb_index.indexer.files import Signature
from ccweb_index.server.service import Service

from conftest import Corpus, session


@pytest.fixture
def coarse_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    tick = time.time_ns()  # the one timestamp every change of the test gets

    def frozen(cls: type[Signature], st: object) -> Signature:
        return cls(st.st_ino, st.st_size, tick, tick)  # type: ignore[attr-defined]

    monkeypatch.setattr(Signature, "of", classmethod(frozen))


@pytest.mark.parametrize(
    "older",
    [
        # Another size, one ctime: the older read is not the file's current state, and its ctime is
        # not later than the row's, so it must not go in.
        "version one",
        # The same size and inode, one tick: the two versions have one signature; the later read wins.
        "v1",
    ],
    ids=["equal-ctime", "identical-signature"],
)
def test_a_late_commit_of_an_older_read_does_not_replace_a_newer_row(
    corpus: Corpus, db_path: Path, coarse_clock: None, older: str
) -> None:
    corpus.write("x", session("v0", updated="2026-11-01T00:00:00Z"))
    h = Service(corpus.path, db_path, watch=True)
    h.start()
    try:
        other = PausedWriter(corpus, db_path)
        corpus.write("x", session(older, updated="2026-11-02T00:00:00Z"))
        other.look_at("x")  # has read the older version, not committed yet
        corpus.write("x", session("v2", updated="2026-11-09T00:00:00Z"))
        assert rows(h) == [("x", "2026-11-09T00:00:00.000Z")]
        other.commit()
        assert rows(h) == [("x", "2026-11-09T00:00:00.000Z")]
    finally:
        h.close()


def test_a_later_read_of_an_identical_signature_still_goes_in(corpus: Corpus, db_path: Path, coarse_clock: None) -> None:
    """The other side: the watcher's own read after the second write has the same signature as its
    read of the first, and must replace it."""
    corpus.write("x", session("v0", updated="2026-11-01T00:00:00Z"))
    h = Service(corpus.path, db_path, watch=True)
    h.start()
    try:
        for day in ("02", "03", "04"):
            corpus.write("x", session("v0", updated=f"2026-11-{day}T00:00:00Z"))
            assert rows(h) == [("x", f"2026-11-{day}T00:00:00.000Z")]
    finally:
        h.close()
