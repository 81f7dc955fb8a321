"""A table of broken hosts.yaml and playbook files: each gives one exact, located error."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.config import ConfigValidationError, load_inventory, load_playbook
from orchestrator.config.errors import did_you_mean, show
from orchestrator.config.yamlload import format_path, parse_yaml
from orchestrator.errors import ConfigError

DATA = Path(__file__).parent / "data" / "config"
BROKEN = DATA / "broken"
UNSET = "ORCH_TEST_UNSET_TOKEN"


def _playbook(path: Path) -> None:
    load_playbook(path)


def _inventory(path: Path) -> None:
    load_inventory(path)


def _host_env(path: Path) -> None:
    for host in load_inventory(path).hosts.values():
        host.resolved_env(environ={})


def _run_env(path: Path) -> None:
    for run in load_playbook(path).expand():
        run.resolved_env(environ={})


def _select(path: Path) -> None:
    inventory = load_inventory(DATA / "hosts-issue.yaml")
    playbook = load_playbook(path)
    for run in playbook.expand():
        playbook.hosts_for(run, inventory)


Action = Callable[[Path], None]
SELECTOR_TAIL = "; hosts: a6000-1, a6000-2; tags: a6000, lab"
NOTHING_TO_USE = "no hosts and no clusters: orch needs at least one of them"

# (file, action, line, column, path, message)
CASES: list[tuple[str, Action, int, int, str | None, str]] = [
    (
        "pb-syntax.yaml",
        _playbook,
        4,
        4,
        None,
        "invalid YAML: expected <block end>, but found '<block mapping start>'",
    ),
    (
        "pb-tab.yaml",
        _playbook,
        3,
        1,
        None,
        "invalid YAML: found character '\\t' that cannot start any token",
    ),
    (
        "pb-duplicate-key.yaml",
        _playbook,
        7,
        5,
        "runs[0].tensor_parallel",
        "duplicate key 'tensor_parallel' (first defined at line 6)",
    ),
    (
        "pb-unknown-key.yaml",
        _playbook,
        8,
        7,
        "runs[0].speculative.num_draft_token",
        "unknown key 'num_draft_token' (did you mean 'num_draft_tokens'?)",
    ),
    (
        "pb-bad-enum.yaml",
        _playbook,
        8,
        27,
        "runs[2].speculative.method",
        "found 'mpt'; allowed: none, dflash, mtp, eagle, eagle3, ngram, draft_model (did you mean 'mtp'?)",
    ),
    (
        "pb-bad-engine.yaml",
        _playbook,
        4,
        13,
        "runs[0].engine",
        "found 'vlm'; allowed: vllm, sglang (did you mean 'vllm'?)",
    ),
    (
        "pb-wrong-type.yaml",
        _playbook,
        6,
        22,
        "runs[0].tensor_parallel",
        "expected an integer, found 'two'",
    ),
    ("pb-missing-model.yaml", _playbook, 3, 5, "runs[0].model", "missing required key 'model'"),
    # a misspelled required key: at the misspelling, the did-you-mean not lost among `others`
    (
        "pb-misspelled-required.yaml",
        _playbook,
        5,
        5,
        "runs[0].model",
        "missing required key 'model' (found unknown key 'modle': did you mean 'model'?)",
    ),
    (
        "hosts-misspelled-hosts.yaml",
        _inventory,
        3,
        1,
        "host",
        "unknown key 'host' (did you mean 'hosts'?)",
    ),
    # ${VAR} unquoted in a flow mapping: YAML reads its '{' as a nested mapping (hint: quote it)
    (
        "pb-env-flow-var.yaml",
        _playbook,
        6,
        22,
        None,
        "invalid YAML: expected ',' or '}', but got '{'",
    ),
    (
        "hosts-env-flow-var.yaml",
        _inventory,
        4,
        22,
        None,
        "invalid YAML: expected ',' or '}', but got '{'",
    ),
    ("pb-empty-runs.yaml", _playbook, 2, 7, "runs", "expected at least 1 item, found 0"),
    (
        "pb-duplicate-run-names.yaml",
        _playbook,
        5,
        12,
        "runs[2].name",
        "duplicate run name 'same' (first used by the run at line 3)",
    ),
    (
        "pb-unknown-selector.yaml",
        _select,
        2,
        16,
        "hosts[1]",
        "unknown host or tag 'a600' (did you mean 'a6000'?)" + SELECTOR_TAIL,
    ),
    (
        "pb-unknown-run-selector.yaml",
        _select,
        8,
        13,
        "runs[1].hosts[0]",
        "unknown host or tag 'labb' (did you mean 'lab'?)" + SELECTOR_TAIL,
    ),
    (
        "pb-bad-matrix-key.yaml",
        _playbook,
        8,
        7,
        "runs[0].matrix.speculative.num_draft_token",
        "matrix key 'speculative.num_draft_token' is not a run field "
        "(did you mean 'speculative.num_draft_tokens'?)",
    ),
    (
        "pb-bad-matrix-value.yaml",
        _playbook,
        12,
        11,
        "runs[0].matrix.workload.concurrency[2]",
        "must be >= 1, found -2",
    ),
    (
        "pb-empty-matrix-list.yaml",
        _playbook,
        6,
        36,
        "runs[0].matrix.workload.concurrency",
        "expected at least 1 item, found 0",
    ),
    (
        "pb-defaults-typo.yaml",
        _playbook,
        6,
        5,
        "defaults.workload.num_prompt",
        "unknown key 'num_prompt' (did you mean 'num_prompts'?)",
    ),
    (
        "pb-defaults-conflict.yaml",
        _playbook,
        9,
        7,
        "runs[0].speculative",
        "prompt_lookup_min (5) must be <= prompt_lookup_max (3)",
    ),
    (
        "pb-defaults-env-unset.yaml",
        _run_env,
        4,
        15,
        "defaults.env.HF_TOKEN",
        f"env HF_TOKEN of run 'a' references ${{{UNSET}}}, which is not set in this shell",
    ),
    ("pb-empty.yaml", _playbook, 1, 1, None, "the file is empty; expected a mapping of keys"),
    (
        "pb-top-list.yaml",
        _playbook,
        1,
        1,
        None,
        "expected a mapping of keys at the top level, found a list",
    ),
    (
        "pb-request-rate-inf.yaml",
        _playbook,
        6,
        30,
        "runs[0].workload.request_rate",
        "expected a finite number, found .inf (YAML reads it as inf)",
    ),
    (
        "pb-bad-run-name.yaml",
        _playbook,
        3,
        11,
        "runs[0].name",
        "run names may only contain letters, digits, '.', '_' and '-'; found 'my run'",
    ),
    (
        "pb-run-not-mapping.yaml",
        _playbook,
        4,
        5,
        "runs[1]",
        "expected a mapping (key: value), found 'vllm-dflash'",
    ),
    (
        "pb-extra-args-bool.yaml",
        _playbook,
        6,
        54,
        "runs[0].extra_args[3]",
        "expected a string, found yes (YAML reads it as true)",
    ),
    (
        "pb-memory-fraction.yaml",
        _playbook,
        6,
        26,
        "runs[0].gpu_memory_fraction",
        "must be > 0 and <= 1, found 1.5",
    ),
    (
        "hosts-negative-port.yaml",
        _inventory,
        6,
        11,
        "hosts.a6000-2.port",
        "must be between 1 and 65535, found -22",
    ),
    (
        "hosts-bad-gpus.yaml",
        _inventory,
        3,
        11,
        "hosts.a6000-1.gpus",
        "expected '<count> x <model>' (e.g. '2 x RTX A6000'), a count, {count, model}, "
        "or none (a CPU host); found 'RTX A6000 x 2'",
    ),
    (
        "hosts-zero-gpus.yaml",  # zero GPUs of a model: a CPU host is `gpus: none`
        _inventory,
        3,
        11,
        "hosts.a6000-1.gpus",
        "0 GPUs of model 'RTX A6000': a CPU host is written `gpus: none`, a GPU host as "
        "'<count> x <model>'",
    ),
    (
        "hosts-unknown-key.yaml",
        _inventory,
        5,
        5,
        "hosts.a6000-1.adress",
        "unknown key 'adress' (did you mean 'address'?)",
    ),
    (
        "hosts-defaults-typo.yaml",
        _inventory,
        3,
        3,
        "defaults.identity",
        "unknown key 'identity' (did you mean 'identity_file'?)",
    ),
    (
        "hosts-bad-transport.yaml",
        _inventory,
        2,
        22,
        "hosts.sim-1.transport",
        "found 'embeded'; allowed: ssh, embedded (did you mean 'embedded'?)",
    ),
    (
        "hosts-group-unknown-member.yaml",
        _inventory,
        3,
        22,
        "groups.lab.hosts[1]",
        "group 'lab' lists unknown host 'a6000-3' (did you mean 'a6000-2'?); hosts: a6000-1, a6000-2",
    ),
    (
        "hosts-group-same-name.yaml",
        _inventory,
        2,
        3,
        "groups.a6000-1",
        "group 'a6000-1' has the same name as a host",
    ),
    (
        "hosts-env-bool.yaml",
        _inventory,
        4,
        33,
        "hosts.a6000-1.env.VLLM_USE_V2_MODEL_RUNNER",
        "expected a string, found yes (YAML reads it as true)",
    ),
    (
        "hosts-unset-var.yaml",
        _host_env,
        7,
        17,
        "hosts.a6000-1.env.HF_TOKEN",
        f"env HF_TOKEN of host 'a6000-1' references ${{{UNSET}}}, which is not set in this shell",
    ),
    # hosts may be left out for clusters: one message when neither is there
    ("hosts-missing-hosts.yaml", _inventory, 1, 1, "hosts", NOTHING_TO_USE),
    ("hosts-no-hosts.yaml", _inventory, 1, 8, "hosts", NOTHING_TO_USE),
    (
        "hosts-recursive-alias.yaml",
        _inventory,
        2,
        6,
        "hosts.a.tags[0]",
        "recursive alias: the value anchored here contains itself",
    ),
    (
        "hosts-bad-env-name.yaml",
        _inventory,
        4,
        7,
        "hosts.a.env.HF TOKEN",
        "environment variable names are letters, digits and '_', not starting with a digit; "
        "found 'HF TOKEN'",
    ),
    (
        "hosts-bad-timeout.yaml",
        _inventory,
        3,
        22,
        "hosts.a.connect_timeout",
        "expected a number, found 'soon'",
    ),
]


@pytest.mark.parametrize(
    ("name", "action", "line", "column", "path", "message"),
    CASES,
    ids=[case[0] for case in CASES],
)
def test_broken_file_gives_one_located_error(
    name: str, action: Action, line: int, column: int, path: str | None, message: str
) -> None:
    file = BROKEN / name
    with pytest.raises(ConfigError) as info:
        action(file)
    err = info.value
    assert (err.file, err.line, err.column, err.path, err.message) == (
        str(file),
        line,
        column,
        path,
        message,
    )
    where = f"{file}:{line}:{column}: "
    assert str(err) == where + (f"{path}: " if path else "") + message


def test_every_broken_file_is_in_the_table() -> None:
    assert sorted(p.name for p in BROKEN.iterdir()) == sorted(case[0] for case in CASES)


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("pb-tab.yaml", "indent with spaces: YAML does not allow tabs"),
        (
            "pb-syntax.yaml",
            "check the indentation and brackets "
            "(while parsing a block collection at line 3, column 3)",
        ),
        ("pb-extra-args-bool.yaml", 'quote it to make it a string: "yes"'),
        ("pb-missing-model.yaml", "model: Target model id or path, e.g. Qwen/Qwen3.6-27B."),
        ("pb-misspelled-required.yaml", "model: Target model id or path, e.g. Qwen/Qwen3.6-27B."),
        (
            "hosts-misspelled-hosts.yaml",
            "allowed keys here: defaults, groups, hosts, clusters, known_hosts, ssh_config",
        ),
        (
            "hosts-missing-hosts.yaml",
            "declare a host under `hosts:` or a Slurm cluster under `clusters:` "
            "(see README: 'Describe your hosts')",
        ),
        (
            "pb-env-flow-var.yaml",
            'quote the value: "${HF_TOKEN}" (inside {...} or [...] YAML '
            "reads an unquoted '{' as the start of a mapping)",
        ),
        (
            "hosts-env-flow-var.yaml",
            'quote the value: "${HF_TOKEN}" (inside {...} or [...] YAML '
            "reads an unquoted '{' as the start of a mapping)",
        ),
        (
            "pb-unknown-key.yaml",
            "allowed keys here: method, draft_model, num_draft_tokens, "
            "draft_tensor_parallel, prompt_lookup_min, prompt_lookup_max, "
            "eagle_topk, options",
        ),
    ],
)
def test_hints_say_what_to_do(name: str, hint: str) -> None:
    load = load_inventory if name.startswith("hosts-") else load_playbook
    with pytest.raises(ConfigError) as info:
        load(BROKEN / name)
    assert info.value.hint == hint


def test_misspelled_required_key_is_told_once(tmp_path: Path) -> None:
    """The unknown key that misspells a missing one is merged into it, not left in ``others``."""
    file = tmp_path / "typo.yaml"
    file.write_text("name: typo\nruns:\n  - name: a\n    engnie: vllm\n    model: m\n    port: 0\n")
    with pytest.raises(ConfigValidationError) as info:
        load_playbook(file)
    err = info.value
    assert (err.line, err.column, err.path, err.message) == (
        4,
        5,
        "runs[0].engine",
        "missing required key 'engine' (found unknown key 'engnie': did you mean 'engine'?)",
    )
    assert [(o.line, o.path, o.message) for o in err.others] == [
        (6, "runs[0].port", "must be between 1 and 65535, found 0"),
    ]


def test_unknown_key_unlike_the_missing_one_stays_apart(tmp_path: Path) -> None:
    file = tmp_path / "apart.yaml"
    file.write_text("name: apart\nruns:\n  - name: a\n    engine: vllm\n    bogus: 1\n")
    with pytest.raises(ConfigValidationError) as info:
        load_playbook(file)
    err = info.value
    assert (err.line, err.column, err.path, err.message) == (
        3,
        5,
        "runs[0].model",
        "missing required key 'model'",
    )
    assert [(o.line, o.path) for o in err.others] == [(5, "runs[0].bogus")]
    assert err.others[0].message.startswith("unknown key 'bogus'; allowed: name, engine, model,")


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ('env: {A: "${A}", B: ${B}}\n', 'quote the value: "${B}"'),  # the one the parser hit
        ("args: [a, ${X}]\n", 'quote the value: "${X}"'),
        ("env: {\n  A: ${A}\n}\n", 'quote the value: "${A}"'),
        ('env: {A: "${A}", B: [}\n', "check the indentation and brackets"),  # quoted: not it
    ],
)
def test_env_reference_in_flow_collections_gets_a_hint(text: str, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_yaml(text, file="t.yaml")
    assert info.value.hint is not None and info.value.hint.startswith(hint)


def test_first_error_in_file_order_and_the_others_kept(tmp_path: Path) -> None:
    file = tmp_path / "multi.yaml"
    file.write_text(
        "name: multi\n"
        "runs:\n"
        "  - name: a\n"
        "    engine: sglang\n"
        "    model: m\n"
        "    bogus: 1\n"
        "    port: 99999\n"
        "    tensor_parallel: 0\n"
    )
    with pytest.raises(ConfigValidationError) as info:
        load_playbook(file)
    err = info.value
    assert (err.line, err.column, err.path) == (6, 5, "runs[0].bogus")
    assert err.message.startswith("unknown key 'bogus'; allowed: name, engine, model, served_name,")
    assert [(o.line, o.column, o.path, o.message) for o in err.others] == [
        (7, 11, "runs[0].port", "must be between 1 and 65535, found 99999"),
        (8, 22, "runs[0].tensor_parallel", "must be >= 1, found 0"),
    ]


def test_cross_field_error_after_merging_defaults_points_at_the_run(tmp_path: Path) -> None:
    """Fine in defaults, wrong once merged: reported at the run's own (merged) mapping."""
    file = tmp_path / "merged.yaml"
    file.write_text(
        "name: merged\n"
        "defaults:\n"
        "  speculative:\n"
        "    prompt_lookup_min: 9\n"
        "runs:\n"
        "  - {name: a, engine: vllm, model: m, speculative: {prompt_lookup_max: 4}}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_playbook(file)
    assert (info.value.line, info.value.column, info.value.path) == (6, 52, "runs[0].speculative")
    assert info.value.message == "prompt_lookup_min (9) must be <= prompt_lookup_max (4)"


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_inventory(missing)
    assert (info.value.file, info.value.line, info.value.message) == (
        str(missing),
        None,
        "file not found",
    )
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"hosts: \xff\xfe\n")
    with pytest.raises(ConfigError) as info:
        load_inventory(binary)
    assert (info.value.line, info.value.column, info.value.message) == (
        1,
        8,
        "not UTF-8 text (byte 0xff at byte 7: invalid start byte)",
    )


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        ("a: 1\n? [x]\n: 2\n", 2, 3, "keys must be plain strings, found a list"),
        (
            "a: !!python/object:os.system x\n",
            1,
            4,
            "invalid YAML: could not determine a constructor for the tag "
            "'tag:yaml.org,2002:python/object:os.system'",
        ),
        ("a: 1\n---\nb: 2\n", 2, 1, "invalid YAML: but found another document"),
        ("a: [1, 2\n", 2, 1, "invalid YAML: expected ',' or ']', but got '<stream end>'"),
    ],
)
def test_yaml_level_errors(text: str, line: int, column: int, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_yaml(text, file="t.yaml")
    assert (info.value.file, info.value.line, info.value.column, info.value.message) == (
        "t.yaml",
        line,
        column,
        message,
    )


def test_merge_keys_are_applied_and_explicit_keys_win() -> None:
    doc = parse_yaml("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\n", file="m.yaml")
    assert doc.data == {"base": {"x": 1, "y": 2}, "other": {"x": 1, "y": 3}}


@pytest.mark.parametrize(
    ("word", "choices", "expected"),
    [
        ("mpt", ["none", "mtp", "eagle"], " (did you mean 'mtp'?)"),
        ("num_draft_token", ["method", "num_draft_tokens"], " (did you mean 'num_draft_tokens'?)"),
        ("zzz", ["method", "options"], ""),
    ],
)
def test_did_you_mean(word: str, choices: list[str], expected: str) -> None:
    assert did_you_mean(word, choices) == expected


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "null (an empty value)"),
        (True, "true"),
        ("two", "'two'"),
        (3, "3"),
        (1.5, "1.5"),
        ({"a": 1}, "a mapping"),
        ([1], "a list"),
    ],
)
def test_show(value: object, shown: str) -> None:
    assert show(value) == shown


def test_format_path() -> None:
    assert format_path(("runs", 2, "speculative", "method")) == "runs[2].speculative.method"
    assert format_path(("hosts", "a6000-2", "port")) == "hosts.a6000-2.port"
    assert format_path(()) == ""
