"""The simulator's parallel sizes (issue 20, item 10): it reads pipeline and data parallel as
vLLM and SGLang do, takes tp x pp x dp GPUs (SGLang's dp attention: tp x pp), splits the weights
over tp x pp, and refuses what the real engines refuse."""

from __future__ import annotations

import pytest

from orchestrator.sim.cli import parse_sglang, parse_vllm
from orchestrator.sim.failures import StartupFailure
from orchestrator.sim.sandbox import Sandbox
from orchestrator.sim.startup import plan_launch

Q36 = "Qwen/Qwen3.6-27B"  # about 50 GiB of bf16 weights: more than one A6000 holds
LEN = ("--max-model-len", "4096")


@pytest.mark.parametrize(
    ("argv", "sizes"),
    [
        (["serve", Q36, "-pp", "2"], (1, 2, 1, 2)),
        (["serve", Q36, "--pipeline_parallel_size=2", "-tp", "2"], (2, 2, 1, 4)),
        (["serve", Q36, "-dp", "2", "--enable-expert-parallel"], (1, 1, 2, 2)),
        (["serve", Q36, "--data-parallel-size", "3"], (1, 1, 3, 3)),
    ],
)
def test_vllm_reads_the_sizes(argv: list[str], sizes: tuple[int, int, int, int]) -> None:
    cfg = parse_vllm(argv)
    assert (cfg.tp, cfg.pp, cfg.dp, cfg.gpus) == sizes


def test_sglang_reads_the_sizes_and_dp_attention_stays_within_tp() -> None:
    cfg = parse_sglang(["--model-path", Q36, "--tp-size", "2", "--pp-size", "2", "--dp", "2"])
    assert (cfg.tp, cfg.pp, cfg.dp, cfg.gpus) == (2, 2, 2, 8)
    within = parse_sglang(
        ["--model-path", Q36, "--tp", "4", "--dp-size", "4", "--enable-dp-attention", "--ep", "4"]
    )
    assert (within.dp, within.dp_within_tp, within.gpus) == (4, True, 4)


def test_a_size_below_one_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        parse_vllm(["serve", Q36, "-pp", "0"])
    assert done.value.code == 2
    assert "argument --pipeline-parallel-size: must be at least 1, got 0" in capsys.readouterr().err


def test_the_27b_model_fits_two_a6000s_by_pipeline_not_one(sim_box: Sandbox) -> None:
    env, state = sim_box.env(), sim_box.state_dir
    with pytest.raises(StartupFailure) as failure:
        plan_launch(parse_vllm(["serve", Q36, *LEN]), env, state)
    assert failure.value.kind == "oom"
    plan = plan_launch(parse_vllm(["serve", Q36, *LEN, "-pp", "2"]), env, state)
    assert plan.devices == [0, 1]
    assert plan.weights_gib == pytest.approx(27.714e9 * 2 / 2 / 1024**3, rel=1e-3)


def test_data_parallel_replicas_each_need_their_gpus(sim_box: Sandbox) -> None:
    env, state = sim_box.env(), sim_box.state_dir
    plan = plan_launch(parse_vllm(["serve", "Qwen/Qwen3-8B", *LEN, "-dp", "2"]), env, state)
    assert plan.devices == [0, 1]
    with pytest.raises(StartupFailure) as failure:  # each replica holds all of the 27B weights
        plan_launch(parse_vllm(["serve", Q36, *LEN, "-dp", "2"]), env, state)
    assert failure.value.kind == "oom"
    with pytest.raises(StartupFailure) as failure:
        plan_launch(parse_vllm(["serve", Q36, *LEN, "-pp", "2", "-dp", "2"]), env, state)
    assert failure.value.traceback[-1] == (
        "ValueError: Data parallel size (2) x world size (2) needs 4 GPUs, 2 visible."
    )
    with pytest.raises(StartupFailure) as failure:
        plan_launch(parse_sglang(["--model-path", Q36, "--pp-size", "4"]), env, state)
    assert failure.value.traceback[-1] == (
        "RuntimeError: CUDA error: invalid device ordinal "
        "(tp_size=1, pp_size=4, dp_size=1: 4 GPUs, 2 visible)"
    )
