"""Regenerate the report screenshot shown in the README (docs/report.png).

    python scripts/screenshot_report.py RESULTS_DIR [OUT.png]     (or: make screenshot)

Builds the report of RESULTS_DIR into a temporary folder (the results folder is left as it is),
opens its report.html in headless Chromium (tests/fixtures/chromium.py), checks that every plot
loaded with no console error and no request off the page, takes a full-page screenshot, and
writes it as a 256-colour PNG (scaled down if needed) of at most MAX_BYTES.
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.commands.report import report  # noqa: E402
from tests.fixtures.chromium import load_page  # noqa: E402

MAX_BYTES = 600_000
WIDTH = 1440


def small_png(raw: bytes, limit: int = MAX_BYTES) -> bytes:
    """The screenshot in 256 colours, scaled down until it fits ``limit`` bytes."""
    image = Image.open(io.BytesIO(raw)).convert("RGB")
    scale = 1.0
    while True:
        size = (round(image.width * scale), round(image.height * scale))
        shown = image if scale == 1.0 else image.resize(size, Image.Resampling.LANCZOS)
        buf = io.BytesIO()
        shown.quantize(colors=256).save(buf, format="PNG", optimize=True)
        if buf.tell() <= limit or scale < 0.3:
            return buf.getvalue()
        scale *= 0.85


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__, file=sys.stderr)
        return 2
    results, out = Path(argv[0]), Path(argv[1] if len(argv) == 2 else ROOT / "docs" / "report.png")
    with tempfile.TemporaryDirectory(prefix="orch-report-") as tmp:
        done = report([results], out=Path(tmp))
        shot = Path(tmp) / "shot.png"
        page = load_page(done.written.html, screenshot=shot, width=WIDTH)
        broken = [i for i in page.images if not (i[0] and i[1] > 0)]
        off_page = [u for u in page.requests if not u.startswith(("file:", "data:"))]
        problems = broken + page.console_errors + page.exceptions + off_page + page.failed
        if problems or len(page.images) != done.plots:
            print(f"the report did not load cleanly: {problems}", file=sys.stderr)
            return 1
        data = small_png(shot.read_bytes())
    out.write_bytes(data)
    print(f"{out}: {len(data) // 1024} KiB, {done.plots} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
