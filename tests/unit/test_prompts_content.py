"""Issue 20: a prompt set records the SHA-256 of the content read, so a file rewritten under
the same name is told apart (resume pins it, results and the nightly key on it)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from orchestrator.loadgen.prompts import load_builtin, load_file


def test_a_prompt_file_records_the_sha256_of_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    data = b'{"prompt": "a"}\r\n{"prompt": "b"}\r\n'
    path.write_bytes(data)
    first = load_file(path)
    assert first.sha256 == hashlib.sha256(data).hexdigest()
    assert first.items == ("a", "b")  # CRLF read as text mode reads it
    path.write_bytes(b'{"prompt": "a"}\n{"prompt": "c"}\n')
    assert load_file(path).sha256 not in (None, first.sha256)


def test_a_builtin_set_records_its_content_and_mixed_differs_from_its_parts() -> None:
    chat, mixed = load_builtin("chat"), load_builtin("mixed")
    assert chat.sha256 is not None and len(chat.sha256) == 64
    assert mixed.sha256 not in (None, chat.sha256)
    assert load_builtin("chat").sha256 == chat.sha256
