"""Prometheus ``/metrics`` scrapes and per-run deltas (pure; the text parser is prometheus_client's).

A run is measured as the difference between a scrape just before and one just after its
window, so warm-up and earlier runs drop out. Conventions, chosen once for every caller:

- A sample is keyed by ``(sample name, frozenset(label items))``: label order never matters.
- ``*_created`` series (counter creation timestamps) are dropped at parse time.
- A series only in ``after`` counts from 0 (engines create some series lazily); a series only
  in ``before`` is ignored. A counter that went down was reset (engine restart): its delta is
  its ``after`` value, as Prometheus' ``increase()`` treats it.
- Several label sets of one name are summed (vLLM: one ``engine`` label per data-parallel
  engine, each counting its own drafts). SGLang series carrying a ``tp_rank`` label are read
  on TP rank 0 only, so tensor-parallel replicas of one scheduler are never double counted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from pydantic import ConfigDict

from orchestrator.errors import OrchError

Labels = frozenset[tuple[str, str]]
SampleKey = tuple[str, Labels]
LabelFilter = Callable[[dict[str, str]], bool]

_COUNTER_SUFFIXES = ("_total", "_count", "_sum", "_bucket")


@dataclass(frozen=True)
class Scrape:
    """One scrape of ``/metrics``: every sample's value by (name, labels)."""

    samples: Mapping[SampleKey, float]

    @classmethod
    def parse(cls, text: str, *, source: str = "/metrics") -> Scrape:
        samples: dict[SampleKey, float] = {}
        try:
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name.endswith("_created"):
                        continue
                    samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
        except ValueError as exc:
            raise OrchError(
                f"{source}: not Prometheus text exposition ({exc})",
                hint="check that the URL is the engine's /metrics endpoint "
                "(SGLang serves it only with --enable-metrics)",
            ) from exc
        return cls(samples)

    def __contains__(self, name: object) -> bool:
        return any(key[0] == name for key in self.samples)

    def series(
        self, name: str, *, where: LabelFilter | None = None, **labels: str
    ) -> dict[Labels, float]:
        """The label sets of ``name`` that carry every ``labels`` pair (and pass ``where``)."""
        found = {}
        for (sample_name, label_set), value in self.samples.items():
            if sample_name != name:
                continue
            as_dict = dict(label_set)
            if all(as_dict.get(k) == v for k, v in labels.items()) and (
                where is None or where(as_dict)
            ):
                found[label_set] = value
        return found

    def value(self, name: str, *, where: LabelFilter | None = None, **labels: str) -> float | None:
        """Sum over the matching label sets; None when the scrape has no such series."""
        found = self.series(name, where=where, **labels)
        return sum(found.values()) if found else None


def _series_delta(name: str, before: float | None, after: float) -> float:
    if before is None:
        return after
    if after < before and name.endswith(_COUNTER_SUFFIXES):
        return after  # reset
    return after - before


def delta(before: Scrape, after: Scrape) -> dict[SampleKey, float]:
    """``after - before`` for every series in ``after`` (see the module docstring for rules)."""
    return {
        key: _series_delta(key[0], before.samples.get(key), value)
        for key, value in after.samples.items()
    }


def counter_delta(
    before: Scrape, after: Scrape, name: str, *, where: LabelFilter | None = None, **labels: str
) -> float | None:
    """Increase of ``name`` summed over its matching label sets; None when ``after`` lacks it."""
    found = after.series(name, where=where, **labels)
    if not found:
        return None
    return sum(_series_delta(name, before.samples.get((name, ls)), v) for ls, v in found.items())


def sglang_rank0(labels: dict[str, str]) -> bool:
    """SGLang series without a ``tp_rank`` label, or on rank 0."""
    return labels.get("tp_rank", "0") == "0"


@dataclass(frozen=True)
class SpecDelta:
    """Speculative decoding over one measured window, from two scrapes.

    ``source``: "counter" (counter deltas), "gauge" (SGLang's last-interval gauge, a fallback)
    or "none" (no speculation seen; ``acceptance_length`` is None). ``note`` says why when
    the source is not "counter". For SGLang ``drafts`` = Δspec_verify_calls and ``accepted``
    = Δgeneration_tokens - Δspec_verify_calls, so 1 + accepted/drafts holds for both engines.
    Persisted as it stands (``Acceptance.prometheus_delta``).
    """

    __pydantic_config__ = ConfigDict(extra="forbid")

    acceptance_length: float | None
    per_position: list[float]
    drafts: float | None
    draft_tokens: float | None
    accepted: float | None
    generation_tokens: float | None
    source: str
    note: str | None = None


def vllm_generation_tokens(before: Scrape, after: Scrape) -> float | None:
    """vLLM's output tokens generated in the window, summed over its engines."""
    return counter_delta(before, after, "vllm:generation_tokens_total")


def sglang_generation_tokens(before: Scrape, after: Scrape) -> float | None:
    """SGLang's output tokens generated in the window, on TP rank 0."""
    return counter_delta(before, after, "sglang:generation_tokens_total", where=sglang_rank0)


def vllm_spec_delta(before: Scrape, after: Scrape) -> SpecDelta:
    """vLLM: acceptance length = 1 + Δaccepted/Δdrafts; position i = Δaccepted_pos_i/Δdrafts.

    Positions are the ``position`` label values ("0".."K-1") sorted numerically, summed over
    engines.
    """
    gen = vllm_generation_tokens(before, after)
    drafts = counter_delta(before, after, "vllm:spec_decode_num_drafts_total")
    draft_tokens = counter_delta(before, after, "vllm:spec_decode_num_draft_tokens_total")
    accepted = counter_delta(before, after, "vllm:spec_decode_num_accepted_tokens_total")
    if drafts is None or accepted is None or drafts <= 0:
        note = (
            "no vllm:spec_decode_* counters: speculative decoding is off"
            if drafts is None or accepted is None
            else "vllm:spec_decode_num_drafts_total did not move: nothing was drafted"
        )
        return SpecDelta(
            None,
            [],
            drafts,
            draft_tokens,
            accepted,
            generation_tokens=gen,
            source="none",
            note=note,
        )
    per_pos: dict[int, float] = {}
    name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    for labels, value in after.series(name).items():
        position = dict(labels).get("position")
        if position is None or not position.isdigit():
            continue
        increase = _series_delta(name, before.samples.get((name, labels)), value)
        per_pos[int(position)] = per_pos.get(int(position), 0.0) + increase
    per_position = [per_pos[p] / drafts for p in sorted(per_pos)]
    return SpecDelta(
        1 + accepted / drafts,
        per_position,
        drafts,
        draft_tokens,
        accepted,
        generation_tokens=gen,
        source="counter",
    )


def sglang_spec_delta(before: Scrape, after: Scrape) -> SpecDelta:
    """SGLang: acceptance length = Δgeneration_tokens/Δspec_verify_calls (TP rank 0).

    Falls back to the ``sglang:spec_accept_length`` gauge of the ``after`` scrape (mean over
    its rank-0 label sets, e.g. several DP ranks) when the counter is absent or did not move;
    the gauge covers only the last decode-log interval, hence the note. A gauge that is
    absent, NaN or <= 0 means no speculation.
    """
    gen = sglang_generation_tokens(before, after)
    verify = counter_delta(before, after, "sglang:spec_verify_calls_total", where=sglang_rank0)
    if verify is not None and verify > 0 and gen is not None:
        return SpecDelta(
            gen / verify,
            [],
            drafts=verify,
            draft_tokens=None,
            accepted=gen - verify,
            generation_tokens=gen,
            source="counter",
        )
    if verify is None:
        why = "sglang:spec_verify_calls_total is absent"
    elif verify <= 0:
        why = "sglang:spec_verify_calls_total did not move during the window"
    else:
        why = "sglang:generation_tokens_total is absent"
    gauges = [
        v
        for v in after.series("sglang:spec_accept_length", where=sglang_rank0).values()
        if math.isfinite(v) and v > 0
    ]
    common = {"drafts": verify, "draft_tokens": None, "accepted": None, "generation_tokens": gen}
    if not gauges:
        note = f"{why} and no sglang:spec_accept_length gauge: no speculation seen"
        return SpecDelta(None, [], **common, source="none", note=note)
    note = (
        f"{why}; using the sglang:spec_accept_length gauge "
        "(last decode-log interval only, not the whole window)"
    )
    return SpecDelta(sum(gauges) / len(gauges), [], **common, source="gauge", note=note)
