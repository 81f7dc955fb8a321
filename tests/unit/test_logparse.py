"""Log parsers: a table of real lines (copied from the reference page) and synthesized variants.

Each case lists every field the event must carry that is not None; `present()` drops the
None fields, so a case also fails when the parser sets a field the line does not have.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.engines.logs import (
    LogFollower,
    detect_engine,
    other_engine_events,
    parse_line,
    parse_log,
    parser_for,
    parsers,
)
from orchestrator.errors import OrchError
from orchestrator.metrics.logparse import (
    Malformed,
    line_drafts,
)
from orchestrator.metrics.vllm_log import EngineStatsEvent, SpecDecodeEvent

LOGS = Path(__file__).parent / "data" / "logs"

VLLM_PREFIX = "(APIServer pid=4021) INFO 12-02 10:57:11 [metrics.py:120] "
# Reference page, verbatim (joined where the page wraps them).
VLLM_ENGINE_REF = (
    "Engine 000: Avg prompt throughput: 2799.5 tokens/s, Avg generation throughput: 7.5 tokens/s, "
    "Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 11.9%, Prefix cache hit rate: 0.0%"
)
VLLM_SPEC_REF = (
    "SpecDecoding metrics: Mean acceptance length: 4.37, Accepted throughput: 1.96 tokens/s, "
    "Drafted throughput: 4.08 tokens/s, Accepted: 172 tokens, Drafted: 357 tokens, "
    "Per-position acceptance rate: 0.863, 0.706, 0.588, 0.471, 0.314, 0.255, 0.176, "
    "Avg Draft acceptance rate: 48.2%"
)
VLLM_SPEC_OLDER_REF = (
    "SpecDecoding metrics: Draft acceptance rate: 52.0%, Mean acceptance length: 2.56, "
    "Accepted: 1024 tokens, Drafted: 1968 tokens, Per-position acceptance rate: 0.760, 0.520, 0.280"
)
VLLM_SPEC_OLDEST_REF = "SpecDecoding metrics: Draft acceptance rate: 52.0%, Accepted: 1024 tokens, Drafted: 1968 tokens"
SGLANG_DECODE_REF = (
    "[2026-07-30 13:35:13 TP0] Decode batch, #running-req: 1, #full token: 257, full token usage: 0.00, "
    "mamba num: 3, mamba usage: 0.03, accept len: 2.83, accept rate: 0.61, cuda graph: True, "
    "gen throughput (token/s): 93.65, #queue-req: 0"
)
SGLANG_DECODE_OLD_REF = (
    "Decode batch. #running-req: 8, #token: 37217, token usage: 0.13, accept len: 2.90, "
    "cuda graph: True, gen throughput (token/s): 171.01, #queue-req: 0, "
)
SGLANG_PREFILL_REF = (
    "Prefill batch, #new-seq: 1, #new-token: 158, #cached-token: 0, token usage: 0.08, "
    "#running-req: 31, #queue-req: 0, cuda graph: True, input throughput (token/s): 559.53"
)

SPEC_REF_FIELDS = {
    "kind": "spec_decode",
    "mean_acceptance_length": 4.37,
    "accepted_throughput": 1.96,
    "drafted_throughput": 4.08,
    "accepted_tokens": 172,
    "drafted_tokens": 357,
    "per_position_acceptance": [0.863, 0.706, 0.588, 0.471, 0.314, 0.255, 0.176],
    "draft_acceptance_rate": 48.2,
}
ENGINE_REF_FIELDS = {
    "kind": "engine_stats",
    "prompt_throughput": 2799.5,
    "generation_throughput": 7.5,
    "running_reqs": 1,
    "waiting_reqs": 0,
    "kv_cache_usage": 11.9,
    "prefix_cache_hit_rate": 0.0,
    "engine_index": 0,
}
VLLM_PREFIX_FIELDS = {"time": "12-02 10:57:11", "pid": 4021, "process": "APIServer"}

CASES = [
    # ---- vLLM, reference lines -------------------------------------------------------------
    ("vllm-engine-ref", "vllm", VLLM_ENGINE_REF, ENGINE_REF_FIELDS),
    (
        "vllm-engine-ref-with-prefix",
        "vllm",
        VLLM_PREFIX + VLLM_ENGINE_REF,
        ENGINE_REF_FIELDS | VLLM_PREFIX_FIELDS,
    ),
    ("vllm-spec-current-ref", "vllm", VLLM_SPEC_REF, SPEC_REF_FIELDS),
    (
        "vllm-spec-current-ref-with-prefix",
        "vllm",
        VLLM_PREFIX + VLLM_SPEC_REF,
        SPEC_REF_FIELDS | VLLM_PREFIX_FIELDS,
    ),
    (
        "vllm-spec-older-ref",
        "vllm",
        VLLM_SPEC_OLDER_REF,
        {
            "kind": "spec_decode",
            "draft_acceptance_rate": 52.0,
            "mean_acceptance_length": 2.56,
            "accepted_tokens": 1024,
            "drafted_tokens": 1968,
            "per_position_acceptance": [0.760, 0.520, 0.280],
        },
    ),
    (
        "vllm-spec-oldest-ref",
        "vllm",
        VLLM_SPEC_OLDEST_REF,
        {
            "kind": "spec_decode",
            "draft_acceptance_rate": 52.0,
            "accepted_tokens": 1024,
            "drafted_tokens": 1968,
        },
    ),
    # ---- vLLM, synthesized from the page's descriptions -----------------------------------
    (
        "vllm-engines-aggregated",
        "vllm",
        "(APIServer pid=4021) INFO 12-02 11:03:40 [loggers.py:257] 2 Engines Aggregated: "
        "Avg prompt throughput: 512.0 tokens/s, Avg generation throughput: 230.4 tokens/s, "
        "Running: 6 reqs, Waiting: 2 reqs, GPU KV cache usage: 34.5%, Prefix cache hit rate: 12.5%",
        {
            "kind": "engine_stats",
            "prompt_throughput": 512.0,
            "generation_throughput": 230.4,
            "running_reqs": 6,
            "waiting_reqs": 2,
            "kv_cache_usage": 34.5,
            "prefix_cache_hit_rate": 12.5,
            "engines_aggregated": 2,
            "time": "12-02 11:03:40",
            "pid": 4021,
            "process": "APIServer",
        },
    ),
    (
        "vllm-engine-every-optional-part",
        "vllm",
        "(EngineCore_DP1 pid=4190) INFO 12-02 11:05:00 [loggers.py:257] Engine 001: "
        "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 512.3 tokens/s, "
        "Running: 8 reqs, Waiting: 3 reqs, Deferred: 1 reqs, Preemptions: 2, "
        "GPU KV cache usage: 88.1%, Prefix cache hit rate: 41.0%, "
        "External prefix cache hit rate: 5.5%, MM cache hit rate: 70.2%",
        {
            "kind": "engine_stats",
            "prompt_throughput": 0.0,
            "generation_throughput": 512.3,
            "running_reqs": 8,
            "waiting_reqs": 3,
            "deferred_reqs": 1,
            "preemptions": 2,
            "kv_cache_usage": 88.1,
            "prefix_cache_hit_rate": 41.0,
            "external_prefix_cache_hit_rate": 5.5,
            "mm_cache_hit_rate": 70.2,
            "engine_index": 1,
            "time": "12-02 11:05:00",
            "pid": 4190,
            "process": "EngineCore_DP1",
        },
    ),
    (
        "vllm-engine-without-prefix-cache-part-and-colour",
        "vllm",
        "\x1b[32mINFO\x1b[0m 12-02 11:06:00 [loggers.py:257] Engine 000: Avg prompt throughput: "
        "10.0 tokens/s, Avg generation throughput: 20.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
        "GPU KV cache usage: 1.0%",
        {
            "kind": "engine_stats",
            "prompt_throughput": 10.0,
            "generation_throughput": 20.0,
            "running_reqs": 1,
            "waiting_reqs": 0,
            "kv_cache_usage": 1.0,
            "engine_index": 0,
            "time": "12-02 11:06:00",
        },
    ),
    (
        "vllm-spec-idle-nan",
        "vllm",
        "(APIServer pid=4021) DEBUG 12-02 10:57:41 [metrics.py:120] SpecDecoding metrics: "
        "Mean acceptance length: nan, Accepted throughput: 0.00 tokens/s, Drafted throughput: "
        "0.00 tokens/s, Accepted: 0 tokens, Drafted: 0 tokens, Per-position acceptance rate: "
        "nan, nan, nan, Avg Draft acceptance rate: nan%",
        {
            "kind": "spec_decode",
            "accepted_throughput": 0.0,
            "drafted_throughput": 0.0,
            "accepted_tokens": 0,
            "drafted_tokens": 0,
            "per_position_acceptance": [None, None, None],
            "time": "12-02 10:57:41",
            "pid": 4021,
            "process": "APIServer",
        },
    ),
    (
        "vllm-spec-unknown-extra-part",
        "vllm",
        "SpecDecoding metrics: Mean acceptance length: 2.00, Accepted: 10 tokens, Drafted: 30 tokens, "
        "Per-position acceptance rate: 0.700, 0.200, 0.100, Avg Draft acceptance rate: 33.3%, "
        "Rejected early: 7",
        {
            "kind": "spec_decode",
            "mean_acceptance_length": 2.0,
            "accepted_tokens": 10,
            "drafted_tokens": 30,
            "per_position_acceptance": [0.7, 0.2, 0.1],
            "draft_acceptance_rate": 33.3,
        },
    ),
    # ---- SGLang, reference lines -----------------------------------------------------------
    (
        "sglang-decode-hybrid-ref",
        "sglang",
        SGLANG_DECODE_REF,
        {
            "kind": "decode_batch",
            "running_reqs": 1,
            "num_tokens": 257,
            "token_usage": 0.0,
            "mamba_num": 3,
            "mamba_usage": 0.03,
            "accept_length": 2.83,
            "accept_rate": 0.61,
            "cuda_graph": True,
            "graph_backend": "cuda",
            "gen_throughput": 93.65,
            "queue_reqs": 0,
            "time": "2026-07-30 13:35:13",
            "tp_rank": 0,
        },
    ),
    (
        "sglang-decode-old-ref",
        "sglang",
        SGLANG_DECODE_OLD_REF,
        {
            "kind": "decode_batch",
            "running_reqs": 8,
            "num_tokens": 37217,
            "token_usage": 0.13,
            "accept_length": 2.90,
            "cuda_graph": True,
            "graph_backend": "cuda",
            "gen_throughput": 171.01,
            "queue_reqs": 0,
        },
    ),
    (
        "sglang-decode-old-ref-tp1-prefix",
        "sglang",
        "[2026-07-30 13:35:13] " + SGLANG_DECODE_OLD_REF,
        {
            "kind": "decode_batch",
            "running_reqs": 8,
            "num_tokens": 37217,
            "token_usage": 0.13,
            "accept_length": 2.90,
            "cuda_graph": True,
            "graph_backend": "cuda",
            "gen_throughput": 171.01,
            "queue_reqs": 0,
            "time": "2026-07-30 13:35:13",
        },
    ),
    (
        "sglang-prefill-ref",
        "sglang",
        SGLANG_PREFILL_REF,
        {
            "kind": "prefill_batch",
            "new_seq": 1,
            "new_tokens": 158,
            "cached_tokens": 0,
            "token_usage": 0.08,
            "running_reqs": 31,
            "queue_reqs": 0,
            "cuda_graph": True,
            "graph_backend": "cuda",
            "input_throughput": 559.53,
        },
    ),
    # ---- SGLang, synthesized variants ------------------------------------------------------
    (
        "sglang-decode-plain-dp-prefix",
        "sglang",
        "[2026-07-30 13:40:02 DP1 TP0] Decode batch, #running-req: 12, #token: 20480, "
        "token usage: 0.25, accept len: 3.10, accept rate: 0.70, cuda graph: True, "
        "gen throughput (token/s): 812.44, #queue-req: 4",
        {
            "kind": "decode_batch",
            "running_reqs": 12,
            "num_tokens": 20480,
            "token_usage": 0.25,
            "accept_length": 3.10,
            "accept_rate": 0.70,
            "cuda_graph": True,
            "graph_backend": "cuda",
            "gen_throughput": 812.44,
            "queue_reqs": 4,
            "time": "2026-07-30 13:40:02",
            "dp_rank": 1,
            "tp_rank": 0,
        },
    ),
    (
        "sglang-decode-swa-no-spec-pp-ep-prefix",
        "sglang",
        "[2026-07-30 13:41:00 PP1 TP3 EP3] Decode batch, #running-req: 2, #full token: 1000, "
        "full token usage: 0.10, #swa token: 500, swa token usage: 0.05, cuda graph: False, "
        "gen throughput (token/s): 55.00, #queue-req: 0",
        {
            "kind": "decode_batch",
            "running_reqs": 2,
            "num_tokens": 1000,
            "token_usage": 0.10,
            "swa_num_tokens": 500,
            "swa_token_usage": 0.05,
            "cuda_graph": False,
            "graph_backend": "cuda",
            "gen_throughput": 55.0,
            "queue_reqs": 0,
            "time": "2026-07-30 13:41:00",
            "pp_rank": 1,
            "tp_rank": 3,
            "ep_rank": 3,
        },
    ),
    (
        "sglang-decode-npu-cap-len-cached-est-iteration",
        "sglang",
        "[2026-07-30 13:42:00 TP0] Decode batch [4711], #running-req: 4, #token: 4096, "
        "token usage: 0.04, accept len: 2.50, accept rate: 0.50, cap len: 3.40, "
        "block accept len: 2.10, npu graph: True, gen throughput (token/s): 120.50, "
        "#queue-req: 1, #cached-token: 64, est. full decode: 3.2s",
        {
            "kind": "decode_batch",
            "running_reqs": 4,
            "num_tokens": 4096,
            "token_usage": 0.04,
            "accept_length": 2.50,
            "accept_rate": 0.50,
            "cap_length": 3.40,
            "block_accept_length": 2.10,
            "cuda_graph": True,
            "graph_backend": "npu",
            "gen_throughput": 120.50,
            "queue_reqs": 1,
            "cached_tokens": 64,
            "iteration": 4711,
            "time": "2026-07-30 13:42:00",
            "tp_rank": 0,
        },
    ),
    (
        "sglang-prefill-old-period-cpu-graph-no-input-throughput",
        "sglang",
        "Prefill batch. #new-seq: 3, #new-token: 900, #cached-token: 100, token usage: 0.02, "
        "#running-req: 5, #queue-req: 2, cpu graph: False, ",
        {
            "kind": "prefill_batch",
            "new_seq": 3,
            "new_tokens": 900,
            "cached_tokens": 100,
            "token_usage": 0.02,
            "running_reqs": 5,
            "queue_reqs": 2,
            "cuda_graph": False,
            "graph_backend": "cpu",
        },
    ),
]


def present(record: object) -> dict:
    return {k: v for k, v in record.to_dict().items() if v is not None and k != "line_no"}


@pytest.mark.parametrize(
    ("engine", "line", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_metrics_line_parses_to_exact_fields(engine: str, line: str, expected: dict) -> None:
    event = parse_line(engine, line, line_no=42)
    assert not isinstance(event, Malformed), event
    assert event is not None
    assert event.line_no == 42
    assert present(event) == expected


MALFORMED = [
    (
        "vllm-truncated-engine-line",
        "vllm",
        VLLM_PREFIX + "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation thro",
        "unexpected part 'Avg generation thro'",
    ),
    (
        "vllm-word-for-a-number",
        "vllm",
        "SpecDecoding metrics: Accepted: many tokens, Drafted: 30 tokens",
        "'Accepted': not a number in tokens: 'many tokens'",
    ),
    (
        "vllm-fractional-count",
        "vllm",
        "SpecDecoding metrics: Accepted: 10.5 tokens, Drafted: 30 tokens",
        "'Accepted': not a whole number: '10.5 tokens'",
    ),
    (
        "vllm-spec-missing-drafted",
        "vllm",
        "SpecDecoding metrics: Draft acceptance rate: 52.0%, Accepted: 1024 tokens",
        "missing 'Drafted'",
    ),
    (
        "vllm-interleaved-lines",
        "vllm",
        VLLM_ENGINE_REF + "(EngineCore_DP0 pid=4188) INFO 12-02 10:57:11 [core.py:9] hello",
        "'Prefix cache hit rate': not a number in %: "
        "'0.0%(EngineCore_DP0 pid=4188) INFO 12-02 10:57:11 [core.py:9] hello'",
    ),
    (
        "sglang-bad-bool",
        "sglang",
        SGLANG_DECODE_REF.replace("cuda graph: True", "cuda graph: maybe"),
        "'cuda graph': not True/False: 'maybe'",
    ),
    (
        "sglang-empty-decode-batch",
        "sglang",
        "[2026-07-30 13:35:13 TP0] Decode batch",
        "missing '#running-req', 'gen throughput (token/s)'",
    ),
    (
        "sglang-truncated-decode",
        "sglang",
        "[2026-07-30 13:35:15 TP0] Decode batch, #running-req: 1, #full token: 301, accept len: 3.",
        "missing 'gen throughput (token/s)'",
    ),
    (
        "vllm-number-cut-after-the-point",
        "vllm",
        VLLM_ENGINE_REF.replace("Prefix cache hit rate: 0.0%", "Prefix cache hit rate: 0."),
        "'Prefix cache hit rate': not a number in %: '0.'",
    ),
    (
        "sglang-fractional-running",
        "sglang",
        SGLANG_DECODE_REF.replace("#running-req: 1,", "#running-req: 1.5,"),
        "'#running-req': not a whole number: '1.5'",
    ),
    (
        "sglang-prefill-bare-fragment",
        "sglang",
        "Prefill batch, #new-seq: 1, #new-token: 158, garbage",
        "unexpected part 'garbage'",
    ),
]


@pytest.mark.parametrize(
    ("engine", "line", "reason"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED]
)
def test_metrics_looking_line_that_does_not_parse_is_malformed(
    engine: str, line: str, reason: str
) -> None:
    record = parse_line(engine, line, line_no=7)
    assert record == Malformed(line_no=7, line=line, reason=reason)


@pytest.mark.parametrize(
    ("engine", "line"),
    [
        (
            "vllm",
            "(APIServer pid=4021) INFO 12-02 10:56:50 [api_server.py:1950] Starting vLLM server on http://127.0.0.1:8000",
        ),
        (
            "vllm",
            '(APIServer pid=4021) INFO:     127.0.0.1:52814 - "POST /v1/completions HTTP/1.1" 200 OK',
        ),
        ("vllm", "(APIServer pid=4021) INFO:     Application startup complete."),
        ("vllm", ""),
        ("sglang", "[2026-07-30 13:35:02] The server is fired up and ready to roll!"),
        (
            "sglang",
            "[2026-07-30 13:34:40 TP0] Capture cuda graph end. Time elapsed: 12.3 s. mem usage=1.2 GB.",
        ),
        ("sglang", "[2026-07-30 13:34:40 TP0] max decode batch size is 64"),
        ("sglang", "[2026-07-30 13:34:40 TP0] Decode batch size 64 exceeds the limit"),
        ("sglang", SGLANG_PREFILL_REF.replace("Prefill batch", "prefill batch")),
    ],
)
def test_unrelated_lines_are_ignored(engine: str, line: str) -> None:
    assert parse_line(engine, line) is None


def test_vllm_lines_are_not_sglang_metrics_and_back() -> None:
    assert parse_line("sglang", VLLM_PREFIX + VLLM_SPEC_REF) is None
    assert parse_line("vllm", SGLANG_DECODE_REF) is None


def test_unknown_engine_is_a_clear_error() -> None:
    with pytest.raises(OrchError) as info:
        parse_line("trtllm", VLLM_SPEC_REF)
    assert info.value.message == "unknown engine 'trtllm'"
    assert info.value.hint == "use one of: sglang, vllm"
    assert sorted(parsers()) == ["sglang", "vllm"]


def test_each_engine_object_names_its_parser() -> None:
    from orchestrator.engines import ENGINES

    assert {name: parser_for(name).engine for name in ENGINES} == {
        "vllm": "vllm",
        "sglang": "sglang",
    }
    assert all(parser_for(name) is engine.log_parser for name, engine in ENGINES.items())


# ---- engine detection ----------------------------------------------------------------------


def test_detect_engine_from_sample_logs() -> None:
    assert detect_engine((LOGS / "vllm_dflash.log").read_text().splitlines()) == "vllm"
    assert detect_engine((LOGS / "sglang_mtp.log").read_text().splitlines()) == "sglang"


def test_detect_engine_majority_and_undecided() -> None:
    assert detect_engine(["hello", "world"]) is None
    assert detect_engine([]) is None
    assert detect_engine([VLLM_SPEC_REF, SGLANG_DECODE_REF]) is None  # a tie decides nothing
    assert detect_engine([VLLM_SPEC_REF, SGLANG_DECODE_REF, VLLM_ENGINE_REF]) == "vllm"


# ---- drafts per line and the summary math -----------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "drafts"),
    [
        (
            {"accepted_tokens": 172, "drafted_tokens": 357, "per_position_acceptance": (0.9,) * 7},
            51.0,
        ),
        ({"accepted_tokens": 200, "drafted_tokens": 300, "mean_acceptance_length": 3.0}, 100.0),
        ({"accepted_tokens": 1024, "drafted_tokens": 1968}, None),  # oldest form: unknowable
        ({"accepted_tokens": 0, "drafted_tokens": 0}, 0.0),
        ({"accepted_tokens": 0, "drafted_tokens": 30, "mean_acceptance_length": 1.0}, None),
        ({"drafted_tokens": 30, "per_position_acceptance": (0.5,)}, None),
        # a real vLLM 0.32 ngram line: drafts shorter than K=4, so 4080 / 4 = 1020 overstates
        # the acceptance (4.88); the printed mean says 3960 / 3.41 drafts (1 + 3960/1161 = 4.41)
        (
            {
                "accepted_tokens": 3960,
                "drafted_tokens": 4080,
                "mean_acceptance_length": 4.41,
                "per_position_acceptance": (1.0, 0.828, 0.828, 0.759),
            },
            3960 / 3.41,
        ),  # fmt: skip
        # a real draft-model line: full drafts, 3792 / 3 = 1264 lies within the mean's rounding
        (
            {
                "accepted_tokens": 512,
                "drafted_tokens": 3792,
                "mean_acceptance_length": 1.41,
                "per_position_acceptance": (0.139, 0.139, 0.127),
            },
            1264.0,
        ),  # fmt: skip
        # the real EAGLE-3 collapse: nothing accepted, the drafts weigh drafted / K
        (
            {
                "accepted_tokens": 0,
                "drafted_tokens": 2280,
                "mean_acceptance_length": 1.0,
                "per_position_acceptance": (0.0, 0.0, 0.0),
            },
            760.0,
        ),  # fmt: skip
        # a mean that cannot be true (more drafts than drafted tokens) is clamped
        (
            {
                "accepted_tokens": 10,
                "drafted_tokens": 40,
                "mean_acceptance_length": 1.2,
                "per_position_acceptance": (0.1, 0.1),
            },
            40.0,
        ),  # fmt: skip
    ],
)
def test_line_drafts(fields: dict, drafts: float | None) -> None:
    got = line_drafts(SpecDecodeEvent(line_no=1, **fields))
    assert got == (pytest.approx(drafts) if drafts is not None else None)


REAL = Path(__file__).parents[1] / "fixtures" / "vllm_cpu"


@pytest.mark.parametrize(
    ("log", "expected"),
    [("ngram.log", 4.40), ("draft.log", 1.34), ("eagle3.log", 1.00)],
)
def test_real_vllm_logs_give_vllms_own_acceptance_length(log: str, expected: float) -> None:
    """The real vLLM 0.32 (CPU build) logs: orch's figure over the log is vLLM's own, each line
    weighted by its drafts (1 + sum accepted / sum(accepted / (mean - 1))), within 2%."""
    lines = (REAL / log).read_text().splitlines()
    events = [e for e in parse_log(lines, engine="vllm").events if isinstance(e, SpecDecodeEvent)]
    accepted = sum(e.accepted_tokens or 0 for e in events)
    own = [(e.accepted_tokens or 0) / ((e.mean_acceptance_length or 1.0) - 1) for e in events
           if (e.mean_acceptance_length or 1) > 1]  # fmt: skip
    vllm_own = 1 + accepted / sum(own) if own else 1.0
    summary = parse_log(lines, engine="vllm").summary
    assert summary.acceptance_length == pytest.approx(vllm_own, rel=0.02)
    assert summary.acceptance_length == pytest.approx(expected, abs=0.01)


def test_vllm_summary_weights_lines_by_drafts_across_versions() -> None:
    lines = [
        VLLM_SPEC_REF,  # 357 drafted / 7 positions = 51 drafts, 172 accepted
        VLLM_SPEC_OLDER_REF,  # 1968 / 3 = 656 drafts, 1024 accepted
        VLLM_SPEC_OLDEST_REF,  # no positions, no mean: left out
        "SpecDecoding metrics: Mean acceptance length: 3.00, Accepted: 200 tokens, Drafted: 300 tokens",
        VLLM_ENGINE_REF,
        VLLM_ENGINE_REF.replace("7.5 tokens/s", "92.5 tokens/s"),
    ]
    summary = parse_log(lines, engine="vllm").summary
    assert summary.events == {"engine_stats": 2, "spec_decode": 4}
    assert summary.acceptance_length == 1 + 1396 / 807
    assert summary.accepted_tokens == 1396
    assert summary.drafts == 807.0
    assert summary.mean_generation_throughput == 50.0
    assert summary.per_position_acceptance == [
        (0.863 * 51 + 0.760 * 656) / 707,
        (0.706 * 51 + 0.520 * 656) / 707,
        (0.588 * 51 + 0.280 * 656) / 707,
        0.471 * 51 / 51,
        0.314 * 51 / 51,
        0.255 * 51 / 51,
        0.176 * 51 / 51,
    ]
    assert summary.malformed == 0


def test_single_vllm_line_summary_reproduces_its_printed_mean() -> None:
    summary = parse_log([VLLM_SPEC_REF], engine="vllm").summary
    assert round(summary.acceptance_length, 2) == 4.37
    assert summary.acceptance_length == 1 + 172 / 51


def test_sglang_summary_is_the_mean_of_accept_len() -> None:
    lines = [
        SGLANG_DECODE_REF,  # 2.83, 93.65 tok/s
        SGLANG_DECODE_OLD_REF,  # 2.90, 171.01 tok/s
        SGLANG_DECODE_REF.replace("accept len: 2.83, accept rate: 0.61, ", ""),  # no spec
        SGLANG_PREFILL_REF,
        "[2026-07-30 13:35:13 TP0] Decode batch",  # malformed
    ]
    parsed = parse_log(lines, engine="sglang")
    summary = parsed.summary
    assert summary.events == {"decode_batch": 3, "prefill_batch": 1}
    assert summary.acceptance_length == (2.83 + 2.90) / 2
    assert summary.mean_generation_throughput == (93.65 + 171.01 + 93.65) / 3
    assert summary.per_position_acceptance is None
    assert summary.accepted_tokens is None
    assert summary.malformed == 1
    assert [m.line_no for m in parsed.malformed] == [5]
    assert [e.line_no for e in parsed.events] == [1, 2, 3, 4]


def test_no_speculation_gives_no_acceptance_length() -> None:
    summary = parse_log([VLLM_ENGINE_REF], engine="vllm").summary
    assert summary.acceptance_length is None
    assert summary.per_position_acceptance is None
    assert summary.accepted_tokens is None
    assert summary.drafts is None
    assert summary.events == {"engine_stats": 1, "spec_decode": 0}


def test_parse_log_auto_detects_and_fails_clearly() -> None:
    assert parse_log([VLLM_PREFIX + VLLM_SPEC_REF]).engine == "vllm"
    with pytest.raises(OrchError) as info:
        parse_log(["nothing to see"])
    assert "could not tell which engine" in info.value.message
    assert info.value.hint == "name the engine explicitly (vllm or sglang)"


def _sample(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


VLLM_STARTUP = VLLM_PREFIX.replace("[metrics.py:120]", "[api_server.py:1811]") + (
    "Starting vLLM server on http://127.0.0.1:8000"
)


@pytest.mark.parametrize(
    ("lines", "engine", "expected"),
    [
        # the wrong engine forced on a whole sample log: the other parser's exact counts
        (_sample("sglang_mtp.log"), "vllm", ("sglang", {"decode_batch": 3, "prefill_batch": 2})),
        (_sample("vllm_dflash.log"), "sglang", ("vllm", {"engine_stats": 3, "spec_decode": 3})),
        ([SGLANG_DECODE_REF], "vllm", ("sglang", {"decode_batch": 1})),
        ([VLLM_PREFIX + VLLM_SPEC_REF], "sglang", ("vllm", {"spec_decode": 1})),
        # the right engine, an idle log, or no metrics at all: nothing to say
        (_sample("sglang_mtp.log"), "sglang", None),
        (_sample("vllm_dflash.log"), "vllm", None),
        ([VLLM_STARTUP], "vllm", None),
        ([VLLM_STARTUP], "sglang", None),
        (["hello", "world"], "vllm", None),
    ],
)
def test_other_engine_events(
    lines: list[str], engine: str, expected: tuple[str, dict[str, int]] | None
) -> None:
    assert other_engine_events(lines, engine=engine) == expected


# ---- the live follower -----------------------------------------------------------------------


def test_follower_fed_in_small_chunks_matches_parse_log() -> None:
    text = (LOGS / "vllm_dflash.log").read_text()
    follower = LogFollower()
    seen = []
    for start in range(0, len(text), 7):
        seen += follower.feed(text[start : start + 7])
    seen += follower.close()
    whole = parse_log(text.splitlines())
    assert follower.engine == "vllm"
    assert follower.result() == whole
    assert [r.line_no for r in seen] == [7, 8, 9, 10, 11, 13, 14]
    assert isinstance(seen[4], Malformed)
    # the idle line's `nan` does not erase the last real figure
    assert follower.latest_acceptance_length == 5.5
    assert follower.latest_gen_throughput == 0.0


def test_follower_running_figures_update_per_line() -> None:
    follower = LogFollower(engine="sglang")
    assert follower.latest_acceptance_length is None
    follower.feed(SGLANG_DECODE_REF + "\n")
    assert (follower.latest_acceptance_length, follower.latest_gen_throughput) == (2.83, 93.65)
    follower.feed(SGLANG_DECODE_OLD_REF + "\n" + SGLANG_PREFILL_REF)  # no newline yet
    assert (follower.latest_acceptance_length, follower.latest_gen_throughput) == (2.90, 171.01)
    assert follower.summary().events == {"decode_batch": 2, "prefill_batch": 0}
    assert [r.kind for r in follower.close()] == ["prefill_batch"]
    assert follower.summary().events == {"decode_batch": 2, "prefill_batch": 1}


def test_follower_keeps_the_last_acceptance_length_over_idle_vllm_lines() -> None:
    follower = LogFollower(engine="vllm")
    follower.feed_line(VLLM_SPEC_REF)
    idle = (
        "SpecDecoding metrics: Mean acceptance length: 1.00, Accepted throughput: 0.00 tokens/s, "
        "Drafted throughput: 0.00 tokens/s, Accepted: 0 tokens, Drafted: 0 tokens, "
        "Per-position acceptance rate: 0.000, 0.000, Avg Draft acceptance rate: nan%"
    )
    follower.feed_line(idle)
    assert follower.latest_acceptance_length == 4.37
    follower.feed_line(
        "SpecDecoding metrics: Accepted: 30 tokens, Drafted: 40 tokens, "
        "Per-position acceptance rate: 0.800, 0.700"
    )
    assert follower.latest_acceptance_length == 1 + 30 / 20


def test_follower_auto_waits_for_a_deciding_line_and_handles_carriage_returns() -> None:
    follower = LogFollower()
    records = follower.feed(
        "Loading safetensors: 10%\rLoading safetensors: 100%\n"
        f"progress 1/2\r{SGLANG_DECODE_REF}\r\n"
    )
    assert follower.engine == "sglang"
    assert [(r.kind, r.line_no) for r in records] == [("decode_batch", 2)]
    assert records[0].accept_length == 2.83


def test_real_cpu_stats_lines_give_the_kv_cache_usage() -> None:
    """The CPU build says "CPU KV cache usage"; the figure must not be lost to the wording."""
    lines = (REAL / "ngram.log").read_text().splitlines()
    stats = [e for e in parse_log(lines, engine="vllm").events if isinstance(e, EngineStatsEvent)]
    assert stats and all(e.kv_cache_usage is not None for e in stats)
    line = next(line for line in lines if "CPU KV cache usage: " in line)
    (event,) = [e for e in parse_log([line], engine="vllm").events]
    printed = float(line.split("CPU KV cache usage: ")[1].split("%")[0])
    assert isinstance(event, EngineStatsEvent) and event.kv_cache_usage == pytest.approx(printed)
