"""orch: benchmark LLM serving engines on remote GPU hosts over SSH."""

from __future__ import annotations

import warnings

__version__ = "0.1.0"

# cryptography 51 deprecates DSA, and asyncssh still declares DSA types at
# import: five warning lines would precede every command's own output (and a
# message a user must read first). orch never offers DSA keys, so the warning
# says nothing about orch; it is silenced here, once, for every entry point.
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh(\.|$)")
