from __future__ import annotations

from orchestrator.cli.main import main

if __name__ == "__main__":
    main()
