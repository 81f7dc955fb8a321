"""Playbooks: the issue's example, defaults merging, matrix expansion, JSON Schema export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import (
    Playbook,
    RunSpec,
    SpeculativeSpec,
    WorkloadSpec,
    json_schema,
    load_inventory,
    load_playbook,
)
from orchestrator.errors import ConfigError

DATA = Path(__file__).parent / "data" / "config"
REPO = Path(__file__).resolve().parents[2]

SPECULATIVE_DEFAULTS: dict[str, Any] = {
    "method": "none",
    "draft_model": None,
    "num_draft_tokens": None,
    "draft_tensor_parallel": None,
    "prompt_lookup_min": None,
    "prompt_lookup_max": None,
    "eagle_topk": None,
    "options": {},
}
WORKLOAD_DEFAULTS: dict[str, Any] = {
    "prompts": "builtin:chat",
    "num_prompts": 64,
    "duration_s": None,
    "concurrency": 1,
    "request_rate": None,
    "burstiness": 1.0,
    "ramp_s": None,
    "max_tokens": 256,
    "input_len": None,
    "temperature": 0.0,
    "ignore_eos": False,
    "api": "chat",
    "chat_template_kwargs": None,
    "warmup": 2,
    "seed": 0,
    "repeat": 1,
    "noisy_ci": 0.1,
    "max_failed_fraction": 0.0,
    "slo": None,
}


def run_dump(name: str, engine: str, model: str, **changes: Any) -> dict[str, Any]:
    """A run as model_dump() gives it: the documented defaults plus ``changes``."""
    out: dict[str, Any] = {
        "name": name,
        "engine": engine,
        "model": model,
        "served_name": model,
        "tensor_parallel": 1,
        "max_model_len": None,
        "gpu_memory_fraction": None,
        "port": None,
        "speculative": dict(SPECULATIVE_DEFAULTS),
        "extra_args": [],
        "env": {},
        "workload": dict(WORKLOAD_DEFAULTS),
        "doctor": "error",
        "ready_timeout_s": 900.0,
        "hosts": None,
        "matrix": None,
    }
    for key, value in changes.items():
        if key in ("speculative", "workload"):
            out[key].update(value)
        else:
            out[key] = value
    return out


def test_issue_example_loads_exactly() -> None:
    file = DATA / "pb-issue.yaml"  # issue 2's example, verbatim
    playbook = load_playbook(file)
    assert (playbook.name, playbook.description, playbook.hosts, playbook.defaults) == (
        "qwen36-27b-spec",
        None,
        ["a6000"],
        None,
    )
    assert [run.model_dump() for run in playbook.runs] == [
        run_dump(
            "sglang-mtp",
            "sglang",
            "Qwen/Qwen3.6-27B",
            tensor_parallel=2,
            speculative={"method": "mtp", "num_draft_tokens": 3},
            workload={"num_prompts": 64, "max_tokens": 512},
        ),
        run_dump(
            "vllm-dflash",
            "vllm",
            "Qwen/Qwen3.6-27B",
            tensor_parallel=2,
            speculative={
                "method": "dflash",
                "draft_model": "z-lab/Qwen3.6-27B-DFlash",
                "num_draft_tokens": 15,
            },
            workload={"num_prompts": 64, "max_tokens": 512},
        ),
    ]
    assert [(run.line, run.source) for run in playbook.runs] == [
        (4, f"{file}:4"),
        (10, f"{file}:10"),
    ]
    assert playbook.source_path == file
    assert playbook.expand() == playbook.runs  # no matrix: each run expands to itself


def test_issue_example_selects_the_repository_sim_hosts() -> None:
    playbook = load_playbook(REPO / "playbooks" / "qwen36-27b-spec.yaml")
    inventory = load_inventory(REPO / "hosts.yaml")
    # one host: the two embedded hosts share this machine's ports (issue 9, item 1)
    assert [h.name for h in playbook.hosts_for(playbook.runs[0], inventory)] == ["sim-a6000-1"]


@pytest.fixture(scope="module")
def sweep() -> Playbook:
    return load_playbook(DATA / "pb-defaults-matrix.yaml")


def test_defaults_are_deep_merged_into_every_run(sweep: Playbook) -> None:
    prompts = str(DATA.resolve() / "prompts" / "chat.jsonl")  # relative to the playbook's folder
    common_workload = {
        "prompts": prompts,
        "max_tokens": 512,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    assert sweep.hosts == ["a6000"]  # a single string is a one-item list
    assert sweep.description == "DFlash draft length and concurrency sweep"
    assert [run.model_dump() for run in sweep.runs] == [
        run_dump(
            "vllm-dflash",
            "vllm",
            "Qwen/Qwen3.6-27B",
            tensor_parallel=2,
            speculative={"method": "dflash", "draft_model": "z-lab/Qwen3.6-27B-DFlash"},
            extra_args=["--attention-backend", "flash_attn", "--max-num-seqs", "8"],
            env={"HF_HOME": "/data/hf", "VLLM_USE_V2_MODEL_RUNNER": "1", "HF_TOKEN": "${HF_TOKEN}"},
            workload=common_workload,
            matrix={"workload.concurrency": [1, 4], "speculative.num_draft_tokens": [7, 15]},
        ),
        run_dump(
            "sglang-plain",
            "sglang",
            "Qwen/Qwen3.6-27B",
            served_name="qwen",
            port=30001,
            tensor_parallel=2,
            hosts=["a6000-2"],
            doctor="warn",
            env={"HF_HOME": "/data/hf", "VLLM_USE_V2_MODEL_RUNNER": "1"},
            # the run's own `workload` mapping is merged with the defaults', key by key
            workload={
                **common_workload,
                "prompts": "random",
                "input_len": 128,
                "concurrency": 2,
                "request_rate": 4.5,
                "api": "completions",
            },
        ),
    ]
    assert [run.line for run in sweep.runs] == [12, 21]


def test_matrix_expands_to_the_cartesian_product_in_written_order(sweep: Playbook) -> None:
    runs = sweep.expand()
    assert [(r.name, r.workload.concurrency, r.speculative.num_draft_tokens) for r in runs] == [
        ("vllm-dflash[concurrency=1,num_draft_tokens=7]", 1, 7),
        ("vllm-dflash[concurrency=1,num_draft_tokens=15]", 1, 15),
        ("vllm-dflash[concurrency=4,num_draft_tokens=7]", 4, 7),
        ("vllm-dflash[concurrency=4,num_draft_tokens=15]", 4, 15),
        ("sglang-plain", 2, None),
    ]
    first = runs[0]
    assert first.matrix is None
    assert first.matrix_values == {"workload.concurrency": 1, "speculative.num_draft_tokens": 7}
    assert runs[-1].matrix_values == {}
    assert runs[-1] is sweep.runs[1]
    # everything else is the base run's
    assert first.model_dump(exclude={"name", "workload", "speculative", "matrix"}) == sweep.runs[
        0
    ].model_dump(exclude={"name", "workload", "speculative", "matrix"})
    assert (first.speculative.method, first.workload.max_tokens, first.source) == (
        "dflash",
        512,
        sweep.runs[0].source,
    )


def test_expanded_runs_resolve_env_and_hosts(sweep: Playbook) -> None:
    inventory = load_inventory(DATA / "hosts-issue.yaml")
    runs = sweep.expand()
    assert runs[1].resolved_env({"HF_TOKEN": "t"}) == {
        "HF_HOME": "/data/hf",
        "VLLM_USE_V2_MODEL_RUNNER": "1",
        "HF_TOKEN": "t",
    }
    assert [h.name for h in sweep.hosts_for(runs[1], inventory)] == ["a6000-1"]  # playbook's tag
    assert [h.name for h in sweep.hosts_for(runs[4], inventory)] == ["a6000-2"]  # run's own


def test_programmatic_playbook_expands_without_a_file() -> None:
    run = RunSpec(
        name="r",
        engine="sglang",
        model="m",
        matrix={
            "speculative": [{"method": "none"}, {"method": "mtp", "num_draft_tokens": 3}],
            "max_tokens": [64],
        },  # not a field path: checked on expand
    )
    playbook = Playbook(name="p", runs=[run])
    with pytest.raises(ConfigError) as info:
        playbook.expand()
    assert (info.value.file, info.value.line, info.value.path, info.value.message) == (
        None,
        None,
        "runs[0].matrix.max_tokens",
        "matrix key 'max_tokens' is not a run field (did you mean 'workload.max_tokens'?)",
    )
    good = Playbook(
        name="p",
        runs=[
            run.model_copy(
                update={
                    "matrix": {
                        "speculative": [
                            {"method": "none"},
                            {"method": "mtp", "num_draft_tokens": 3},
                        ],
                        "workload.chat_template_kwargs.enable_thinking": [False],
                    }
                }
            )
        ],
    )
    expanded = good.expand()
    assert [r.name for r in expanded] == [
        "r[speculative={method:none},enable_thinking=false]",
        "r[speculative={method:mtp,num_draft_tokens:3},enable_thinking=false]",
    ]
    assert expanded[1].speculative == SpeculativeSpec(method="mtp", num_draft_tokens=3)
    assert expanded[1].workload == WorkloadSpec(chat_template_kwargs={"enable_thinking": False})


def test_matrix_keys_with_the_same_last_part_are_named_in_full() -> None:
    run = RunSpec(name="r", engine="vllm", model="m", matrix={"port": [8000], "env.port": ["1"]})
    assert [r.name for r in Playbook(name="p", runs=[run]).expand()] == ["r[port=8000,env.port=1]"]


def test_changing_the_model_in_a_matrix_keeps_served_name_following_it() -> None:
    run = RunSpec(name="r", engine="vllm", model="a", matrix={"model": ["b"]})
    (only,) = Playbook(name="p", runs=[run]).expand()
    assert (only.model, only.served_name) == ("b", "b")
    named = RunSpec(name="r", engine="vllm", model="a", served_name="x", matrix={"model": ["b"]})
    (only,) = Playbook(name="p", runs=[named]).expand()
    assert (only.model, only.served_name) == ("b", "x")


def test_expansion_starts_from_the_run_as_it_is_now() -> None:
    run = RunSpec(name="r", engine="vllm", model="m", matrix={"workload.concurrency": [2]})
    changed = run.model_copy(update={"tensor_parallel": 4})
    (only,) = Playbook(name="p", runs=[changed]).expand()
    assert (only.name, only.tensor_parallel, only.workload.concurrency) == (
        "r[concurrency=2]",
        4,
        2,
    )


def test_run_defaults_and_coercions() -> None:
    run = RunSpec(
        name="r",
        engine="vllm",
        model="org/model",
        extra_args=["--x", 3, 0.5],
        env={"N": 4},
        hosts="lab",
    )
    assert run.model_dump() == run_dump(
        "r", "vllm", "org/model", extra_args=["--x", "3", "0.5"], env={"N": "4"}, hosts=["lab"]
    )
    assert run.source is None and run.line is None


def test_defaults_cannot_name_runs(tmp_path: Path) -> None:
    file = tmp_path / "p.yaml"
    file.write_text("name: p\ndefaults:\n  name: x\nruns:\n  - {name: a, engine: vllm, model: m}\n")
    with pytest.raises(ConfigError) as info:
        load_playbook(file)
    assert (info.value.line, info.value.column, info.value.path) == (3, 3, "defaults.name")
    assert info.value.message.startswith("unknown key 'name'; allowed: engine, model,")


def test_absolute_and_home_prompt_paths(tmp_path: Path) -> None:
    file = tmp_path / "p.yaml"
    file.write_text(
        "name: p\nruns:\n"
        "  - {name: a, engine: vllm, model: m, workload: {prompts: /data/p.jsonl}}\n"
        "  - {name: b, engine: vllm, model: m, workload: {prompts: ~/p.jsonl}}\n"
        "  - {name: c, engine: vllm, model: m, workload: {prompts: 'builtin:code'}}\n"
    )
    runs = load_playbook(file).runs
    assert [r.workload.prompts for r in runs] == [
        "/data/p.jsonl",
        str(Path("~/p.jsonl").expanduser()),
        "builtin:code",
    ]


def test_json_schema_playbook_has_every_field_with_help() -> None:
    schema = json_schema("playbook")
    defs = schema["$defs"]
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "orch playbook"
    assert schema["required"] == ["name", "runs"]
    assert list(defs["RunSpec"]["properties"]) == list(RunSpec.model_fields)
    assert defs["RunSpec"]["required"] == ["name", "engine", "model"]
    assert defs["RunSpec"]["additionalProperties"] is False
    assert list(defs["SpeculativeSpec"]["properties"]) == list(SpeculativeSpec.model_fields)
    assert list(defs["WorkloadSpec"]["properties"]) == list(WorkloadSpec.model_fields)
    assert defs["SpeculativeSpec"]["properties"]["method"]["enum"] == [
        "none",
        "dflash",
        "mtp",
        "eagle",
        "eagle3",
        "ngram",
        "draft_model",
    ]
    assert defs["RunSpec"]["properties"]["engine"]["enum"] == ["vllm", "sglang"]
    assert "required" not in defs["RunDefaults"]
    assert "name" not in defs["RunDefaults"]["properties"]
    for model in ("RunSpec", "SpeculativeSpec", "WorkloadSpec"):
        for field, prop in defs[model]["properties"].items():
            assert prop.get("description"), f"{model}.{field} has no description"


def test_json_schema_hosts() -> None:
    schema = json_schema("hosts")
    host = schema["$defs"]["HostFields"]["properties"]
    assert schema["title"] == "orch hosts.yaml"
    assert "required" not in schema  # hosts, or clusters, or both
    assert schema["anyOf"] == [{"required": ["hosts"]}, {"required": ["clusters"]}]
    assert list(host) == [
        "address",
        "port",
        "user",
        "identity_file",
        "proxy_jump",
        "python",
        "workdir",
        "env",
        "gpus",
        "tags",
        "transport",
        "connect_timeout",
        "agent_timeout_s",
    ]
    assert host["port"]["anyOf"][0] == {"maximum": 65535, "minimum": 1, "type": "integer"}
    assert host["transport"]["anyOf"][0]["enum"] == ["ssh", "embedded"]
    assert [alt.get("type") for alt in host["gpus"]["anyOf"]] == [
        "string",
        "string",  # none / cpu: a CPU host
        "integer",
        "object",
        "null",
    ]
    assert "hosts" in schema["$defs"]["GroupFields"]["properties"]


def test_json_schema_unknown_kind() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown schema 'playbok' \(did you mean 'playbook'\?\)"
    ):
        json_schema("playbok")  # type: ignore[arg-type]


def test_prompt_files_may_be_json_or_jsonl(tmp_path: Path) -> None:
    file = tmp_path / "p.yaml"
    file.write_text(
        "name: p\nruns:\n"
        "  - {name: a, engine: vllm, model: m, workload: {prompts: data/sharegpt.json}}\n"
        "  - {name: b, engine: vllm, model: m, workload: {prompts: data/p.jsonl}}\n"
    )
    assert [r.workload.prompts for r in load_playbook(file).runs] == [
        str(tmp_path / "data" / "sharegpt.json"),
        str(tmp_path / "data" / "p.jsonl"),
    ]
    file.write_text(
        "name: p\nruns:\n"
        "  - name: a\n    engine: vllm\n    model: m\n    workload:\n      prompts: data/p.csv\n"
    )
    with pytest.raises(ConfigError) as info:
        load_playbook(file)
    assert (info.value.file, info.value.line, info.value.path) == (
        str(file),
        7,
        "runs[0].workload.prompts",
    )
    assert "a path to a .jsonl or .json file; found 'data/p.csv'" in info.value.message


def caps(tmp_path: Path, text: str) -> dict[str, tuple[float | None, int, int | None]]:
    """Each expanded run's (request_rate, concurrency, open_loop_cap)."""
    file = tmp_path / "caps.yaml"
    file.write_text(text)
    return {
        r.name: (r.workload.request_rate, r.workload.concurrency, r.workload.open_loop_cap)
        for r in load_playbook(file).expand()
    }


def test_a_closed_loop_concurrency_from_defaults_caps_no_open_loop(tmp_path: Path) -> None:
    assert caps(
        tmp_path,
        """
name: p
defaults: {workload: {concurrency: 8}}
runs:
  - {name: closed, engine: vllm, model: m}
  - {name: open, engine: vllm, model: m, workload: {request_rate: 5}}
  - {name: capped, engine: vllm, model: m, workload: {request_rate: 5, concurrency: 4}}
  - {name: rates, engine: vllm, model: m, matrix: {workload.request_rate: [2, 4]}}
  - name: capped-by-matrix
    engine: vllm
    model: m
    workload: {request_rate: 5}
    matrix: {workload.concurrency: [2, 3]}
""",
    ) == {
        "closed": (None, 8, None),
        "open": (5.0, 8, None),
        "capped": (5.0, 4, 4),
        "rates[request_rate=2]": (2.0, 8, None),
        "rates[request_rate=4]": (4.0, 8, None),
        "capped-by-matrix[concurrency=2]": (5.0, 2, 2),
        "capped-by-matrix[concurrency=3]": (5.0, 3, 3),
    }


def test_defaults_that_describe_an_open_loop_keep_their_cap(tmp_path: Path) -> None:
    assert caps(
        tmp_path,
        """
name: p
defaults: {workload: {request_rate: 10, concurrency: 4}}
runs:
  - {name: inherits, engine: vllm, model: m}
  - {name: own-rate, engine: vllm, model: m, workload: {request_rate: 20}}
  - {name: rates, engine: vllm, model: m, matrix: {workload.request_rate: [5]}}
  - {name: closed, engine: vllm, model: m, workload: {request_rate: null}}
""",
    ) == {
        "inherits": (10.0, 4, 4),
        "own-rate": (20.0, 4, 4),
        "rates[request_rate=5]": (5.0, 4, 4),
        "closed": (None, 4, None),
    }
    # a rate the defaults set to null is no open loop: their concurrency is the closed loop's
    assert caps(
        tmp_path,
        """
name: p
defaults: {workload: {request_rate: null, concurrency: 4}}
runs:
  - {name: open, engine: vllm, model: m, workload: {request_rate: 5}}
""",
    ) == {"open": (5.0, 4, None)}


def test_matrix_expansion_keeps_which_workload_keys_were_written() -> None:
    """The expansion re-validates a dump: the field default of 1 must not become a cap."""
    open_run = RunSpec(
        name="r",
        engine="vllm",
        model="m",
        workload={"request_rate": 3.0},
        matrix={"workload.max_tokens": [32], "tensor_parallel": [2]},
    )
    (only,) = Playbook(name="p", runs=[open_run]).expand()
    assert (only.workload.max_tokens, only.workload.concurrency) == (32, 1)
    assert only.workload.open_loop_cap is None
    assert only.workload.model_fields_set == {"request_rate", "max_tokens"}
    capped = open_run.model_copy(update={"workload": WorkloadSpec(request_rate=3.0, concurrency=2)})
    (only,) = Playbook(name="p", runs=[capped]).expand()
    assert only.workload.open_loop_cap == 2
    whole = RunSpec(
        name="r",
        engine="vllm",
        model="m",
        matrix={"workload": [{"request_rate": 2.0}, {"concurrency": 3}]},
    )
    assert [
        (r.workload.request_rate, r.workload.open_loop_cap)
        for r in Playbook(name="p", runs=[whole]).expand()
    ] == [(2.0, None), (None, None)]
