"""What the load generator sends over the wire: a record's chunks take the codec's fast encode
and come out exactly as the general walk would write them, refusals included."""

from __future__ import annotations

import pytest

from orchestrator.remote import codec
from orchestrator.remote.wire import Chunk, RequestRecord, WireError

RECORD = RequestRecord(
    index=3,
    warmup=False,
    start=0.5,
    start_wall=1.7e9,
    end=1.5,
    begun=0.25,
    chunks=(Chunk(0.125, 1), Chunk(1, 3), Chunk(0.375, 2)),  # an int time is a number too
)


def test_chunks_encode_as_pairs_and_round_trip():
    out = RECORD.to_json()
    assert out["chunks"] == [[0.125, 1], [1, 3], [0.375, 2]]
    assert (out["begun"], out["start"]) == (0.25, 0.5)
    assert RequestRecord.from_json(out) == RECORD


def test_the_fast_encode_writes_what_the_general_walk_writes(monkeypatch: pytest.MonkeyPatch):
    plain = RequestRecord(
        index=0, warmup=True, start=0.0, start_wall=0.0, end=0.0, chunks=((0.5, 2),)
    )
    fast = [RECORD.to_json(), plain.to_json()]
    assert fast[1]["chunks"] == [[0.5, 2]]  # a plain pair: the general walk's business
    monkeypatch.setattr(codec, "_encode_numbers", lambda tp, kinds, value: None)
    assert [RECORD.to_json(), plain.to_json()] == fast


@pytest.mark.parametrize(
    ("chunks", "message"),
    [
        (
            (Chunk(0.1, 1), Chunk(0.2, True)),
            "RequestRecord.chunks[1][1]: expected an integer, got a boolean",
        ),
        ((Chunk(0.1, 1.5),), "RequestRecord.chunks[0][1]: expected an integer, got the number 1.5"),
        ((Chunk("0.1", 1),), "RequestRecord.chunks[0][0]: expected a number, got the string '0.1'"),
    ],
)
def test_a_chunk_that_does_not_fit_is_refused_by_its_place(chunks: tuple, message: str):
    record = RequestRecord(index=0, warmup=False, start=0.0, start_wall=0.0, end=0.0, chunks=chunks)
    with pytest.raises(WireError) as caught:
        record.to_json()
    assert str(caught.value) == message
