"""The note a run leaves when its record cannot be written: room held at its start, filled in place."""

from __future__ import annotations

import os

from sqlalchemy.engine import make_url

from program.store.unsaved import REASON_CHARS, SIZE, UnsavedNotes, notes_directory


def test_the_note_is_written_into_the_room_held_for_it_and_never_grows_the_file(tmp_path):
    notes = UnsavedNotes(tmp_path / "audit.db.unsaved")
    assert notes.reserve("run-1")
    (held,) = (tmp_path / "audit.db.unsaved").iterdir()
    blocks = os.stat(held).st_blocks
    assert notes.read("run-1") is None
    assert notes.note("run-1", "database or disk is full " + "x" * (SIZE * 2))
    assert os.stat(held).st_size == SIZE and os.stat(held).st_blocks == blocks
    reason = notes.read("run-1")
    assert reason.startswith("database or disk is full") and len(reason) == REASON_CHARS
    notes.release("run-1")
    assert not held.exists() and notes.read("run-1") is None


def test_a_run_that_reserved_no_room_notes_nothing(tmp_path):
    notes = UnsavedNotes(tmp_path / "notes")
    assert not notes.note("never-reserved", "full")
    assert not (tmp_path / "notes").exists()
    assert not UnsavedNotes(None).reserve("run-1") and UnsavedNotes(None).read("run-1") is None


def test_a_note_that_is_not_the_runs_own_is_not_read(tmp_path):
    notes = UnsavedNotes(tmp_path)
    notes.reserve("run-1")
    (held,) = tmp_path.iterdir()
    for garbage in (b"\xff\xfe" * 10, b'{"session_id": "run-2", "reason": "full"}', b"[1, 2]", b'{"reason": 3}'):
        held.write_bytes(garbage)
        assert notes.read("run-1") is None


def test_a_sqlite_files_notes_live_beside_it_and_a_servers_apart_from_its_password(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert notes_directory(make_url(f"sqlite:///{tmp_path}/a.db"), in_memory=False) == tmp_path / "a.db.unsaved"
    assert notes_directory(make_url("sqlite://"), in_memory=True) is None
    one = notes_directory(make_url("postgresql+psycopg://u:secret@db/audit"), in_memory=False)
    other = notes_directory(make_url("postgresql+psycopg://u:other@db/audit"), in_memory=False)
    assert one == other and one.parent == tmp_path / ".grounded-diagnosis" / "unsaved"
    assert "secret" not in str(one)
