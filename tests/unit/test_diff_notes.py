"""file_changes' notes (``Baseline.changes``): what the diff does not show whole, recorded
where it is made so a reader is told, never left to guess: where the cap cut it, which files
are not diffed line by line and why (binary, over ``DIFF_FILE_BYTES``, over
``DIFF_FILE_LINES``, with holes), and the real path of each name git's headers quote."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

import pytest

from gradebox.files import baseline
from gradebox.files.baseline import Baseline, ChangedFile
from gradebox.protocol.models import FileChangesNotes
from tests.conftest import write

# Names git quotes in its headers (a newline, a tab at the end, a quote, a backslash, a
# control byte, DEL, a byte not UTF-8), and two it does not (a space, past ASCII).
ODD = [
    b"evil\nname\xe2\x80\xb9svg\xe2\x80\xa6>.md",
    b"tab at the end\t",
    b'q"u\\o\x01\x7f',
    b"caf\xe9 \n",
    b"del\x7f",
]
PLAIN = [b"sp ace.txt", "na\u00efve\u202e.txt".encode()]


@pytest.fixture(autouse=True)
def _baselines_in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def _add(ws: Path, name: bytes, data: bytes = b"x\n") -> None:
    with open(os.fsencode(ws) + b"/" + name, "wb") as f:
        f.write(data)


def test_a_quoted_name_is_noted_with_its_real_path_exactly_as_git_quotes_it(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    base = Baseline.take(ws)
    for name in ODD + PLAIN:
        _add(ws, name)
    changes = base.changes()
    base.discard()
    assert changes.paths == len(ODD + PLAIN) and not changes.truncated
    notes = {f.path: f for f in changes.files}
    real = {n.decode("utf-8", "backslashreplace") for n in ODD}
    assert set(notes) == real  # the odd names, and only those
    # Every name git quoted in the text is one of the notes' ``quoted``, and says its path.
    headers = re.findall(r'^\+\+\+ "b/(.*)"\t?$', changes.text, re.M)
    assert sorted(headers) == sorted(f.quoted for f in changes.files)
    assert notes["evil\nname\u2039svg\u2026>.md"].quoted == "evil\\nname\u2039svg\u2026>.md"
    assert notes['q"u\\o\x01\x7f'].quoted == 'q\\"u\\\\o\\001\\177'
    assert notes["caf\\xe9 \n"].quoted == "caf\\xe9 \\n"  # not UTF-8: \xNN, as in the text
    assert all(f.cut is None for f in changes.files)


def test_files_not_diffed_line_by_line_are_noted_with_why(tmp_path, monkeypatch):
    monkeypatch.setattr(baseline, "DIFF_FILE_BYTES", 4096)
    monkeypatch.setattr(baseline, "DIFF_FILE_LINES", 50)
    ws = tmp_path / "ws"
    write(ws / "shrinks.txt", "line\n" * 40)
    write(ws / "kept.txt", "same\n")
    (ws / "gone.bin").write_bytes(b"\xff\x00" * 10)
    base = Baseline.take(ws)
    write(ws / "shrinks.txt", "word " * 2000)  # 10,000 bytes: over the size limit
    write(ws / "long.txt", "l\n" * 60)  # over the lines limit
    (ws / "new.bin").write_bytes(b"\x00\xfe" * 8)
    (ws / "gone.bin").unlink()
    with open(ws / "holes", "wb") as f:
        f.truncate(1 << 30)
    write(ws / "small.txt", "fine\n")
    changes = base.changes()
    base.discard()
    assert {f.path: (f.cut, f.size) for f in changes.files} == {
        "shrinks.txt": ("size", 10_000),  # the new side: what the diff shows as a summary
        "long.txt": ("lines", 120),
        "new.bin": ("binary", 16),
        "gone.bin": ("binary", 20),  # deleted: the old side
        "holes": ("sparse", 1 << 30),
    }
    assert (changes.file_bytes, changes.file_lines) == (4096, 50)
    assert changes.paths == 6 and changes.more == 0
    notes = FileChangesNotes.model_validate(changes, from_attributes=True)  # the result's
    assert [ChangedFile(**f.model_dump()) for f in notes.files] == list(changes.files)


def test_the_cap_is_recorded_with_the_size_git_wrote(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    base = Baseline.take(ws)
    write(ws / "big.txt", "line of text\n" * 10000)
    write(ws / "after.txt", "later\n")
    changes = base.changes(cap=4096)
    base.discard()
    assert changes.truncated and changes.cap == 4096 and changes.size > 130_000
    assert changes.paths == 2 and changes.files == ()
    assert f"of {changes.size} bytes dropped]" in changes.text  # the same figure as the text


def test_ignored_paths_are_counted_apart_and_never_noted(tmp_path):
    ws = tmp_path / "ws"
    write(ws / ".gitignore", "*.log\n")
    base = Baseline.take(ws)
    _add(ws, b"noise\n.log", b"\x00\x01")  # an odd name, binary, ignored: listed by name
    write(ws / "seen.txt", "x\n")
    changes = base.changes()
    base.discard()
    assert changes.paths == 1 and changes.files == ()


def test_notes_past_their_budget_are_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(baseline, "NOTED_BYTES", 100)
    ws = tmp_path / "ws"
    ws.mkdir()
    base = Baseline.take(ws)
    for i in range(20):
        _add(ws, b"f%02d\n" % i + b"x" * 10)  # 15 bytes of name, 16 quoted: 3 fit in 100
    changes = base.changes()
    base.discard()
    assert len(changes.files) == 3 and changes.more == 17
    assert [f.path for f in changes.files] == [f"f{i:02d}\n" + "x" * 10 for i in range(3)]


def test_a_link_is_never_noted_as_a_file_not_diffed(tmp_path, monkeypatch):
    # A link's blob is its target: one that reads exactly like a summary is still a link.
    monkeypatch.setattr(baseline, "DIFF_FILE_BYTES", 64)
    ws = tmp_path / "ws"
    data = b"a line\n" * 20
    write(ws / "big.txt", data.decode())
    base = Baseline.take(ws)
    digest = hashlib.sha1(b"blob %d\0%s" % (len(data), data))
    os.symlink(baseline._text_summary(len(data), 20, digest), ws / "link")
    changes = base.changes()
    base.discard()
    assert "+[gradebox: text, 140 bytes, 20 lines" in changes.text  # the link, as git shows it
    assert changes.files == () and changes.paths == 1
