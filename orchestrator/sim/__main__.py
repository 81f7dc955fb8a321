"""``python -m orchestrator.sim {vllm|sglang} ARGS...``: run the simulator as one engine's CLI.

``vllm`` takes vLLM's own command line (``serve MODEL ...``); ``sglang`` takes the arguments of
``python -m sglang.launch_server``. The sandbox's ``vllm`` script and ``sglang.launch_server``
module call ``main`` the same way.
"""

from __future__ import annotations

import sys

USAGE = "usage: python -m orchestrator.sim {vllm|sglang} [engine arguments...]\n"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("vllm", "sglang"):
        sys.stderr.write(USAGE)
        return 2
    engine, rest = args[0], args[1:]
    # Imported here so that a bad command line fails fast, before aiohttp is even loaded.
    from orchestrator.sim.cli import parse

    cfg = parse(engine, rest)
    from orchestrator.sim.server import main as serve

    return serve(engine, cfg)


if __name__ == "__main__":
    sys.exit(main())
