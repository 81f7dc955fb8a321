"""How many GPUs a server uses, from every kind of parallelism its command line sets.

A server's GPU count is not its tensor-parallel size: ``--pipeline-parallel-size 2`` splits
the layers over twice the GPUs, and ``--data-parallel-size 2`` runs two replicas, each on its
own tensor x pipeline GPUs. Counting tensor parallelism alone recorded one GPU for a two-GPU
server (its throughput per GPU was the total) and let two runs share a GPU on a shared host.
The engine object reads each size from the argv it builds (``Engine.parallelism``); everything
that needs a GPU count (placement, Slurm's gres, the doctor, per-GPU figures, the estimate, the
result) reads ``Parallelism.gpus``.

Expert parallelism adds no GPU: vLLM's ``--enable-expert-parallel`` shards the experts over the
tensor x data GPUs already there (expert size = tensor x data); SGLang's ``--ep-size`` runs within
the tensor-parallel group. SGLang's ``--enable-dp-attention`` makes its data-parallel ranks
attention replicas inside the tensor-parallel group too: no extra GPU either.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Parallelism:
    """The sizes a server runs with; ``data_within_tensor``: its data-parallel ranks share the
    tensor-parallel GPUs (SGLang's dp attention) instead of being replicas on GPUs of their own."""

    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    expert: int = 1  # 1: no expert parallelism
    data_within_tensor: bool = False

    @property
    def replicas(self) -> int:
        """Full copies of the weights the server holds."""
        return 1 if self.data_within_tensor else self.data

    @property
    def shards(self) -> int:
        """GPUs one copy of the weights is split over (each holds about 1/shards of them)."""
        return self.tensor * self.pipeline

    @property
    def gpus(self) -> int:
        """GPUs the server uses: tensor x pipeline x data (data only when its ranks are
        replicas)."""
        return self.shards * self.replicas

    def describe(self) -> str:
        """``tensor_parallel 2 x pipeline 2`` (the sizes above 1, tensor always)."""
        parts = [f"tensor_parallel {self.tensor}"]
        parts += [
            f"{name} {size}"
            for name, size in (("pipeline", self.pipeline), ("data", self.data))
            if size > 1
        ]
        if self.data > 1 and self.data_within_tensor:
            parts[-1] += " (dp attention, within tensor)"
        return " x ".join(parts)

    def to_json(self) -> dict[str, int]:
        return {
            "tensor": self.tensor,
            "pipeline": self.pipeline,
            "data": self.data,
            "expert": self.expert,
        }
