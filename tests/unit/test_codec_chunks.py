"""A record's chunks decode fast (``codec._numbers``) and exactly as the general walk would,
refusals included."""

from __future__ import annotations

import pytest

from orchestrator.remote.wire import Chunk, RequestRecord, WireError

BASE = {"index": 3, "warmup": False, "start": 0.5, "start_wall": 1.7e9, "end": 1.5}


def test_chunks_decode_to_typed_pairs() -> None:
    record = RequestRecord.from_json({**BASE, "chunks": [[0.01, 1], [1, 3], [0.25, 2]]})
    assert record.chunks == (Chunk(0.01, 1), Chunk(1.0, 3), Chunk(0.25, 2))
    assert [type(c.t) for c in record.chunks] == [float, float, float]
    assert RequestRecord.from_json(record.to_json()) == record


@pytest.mark.parametrize(
    ("chunks", "message"),
    [
        ([[0.1, 1], [0.2, True]], "RequestRecord.chunks[1][1]: expected an integer, got a boolean"),
        ([[0.1, 1.5]], "RequestRecord.chunks[0][1]: expected an integer, got the number 1.5"),
        ([["0.1", 1]], "RequestRecord.chunks[0][0]: expected a number, got the string '0.1'"),
        ([[0.1]], "RequestRecord.chunks[0]: expected an array of 2 (t, tokens), got an array"),
        (
            [{"t": 0.1}],
            "RequestRecord.chunks[0]: expected an array of 2 (t, tokens), got an object",
        ),
    ],
)
def test_a_chunk_that_does_not_fit_is_refused_by_its_place(chunks: list, message: str) -> None:
    with pytest.raises(WireError) as caught:
        RequestRecord.from_json({**BASE, "chunks": chunks})
    assert str(caught.value) == message
