"""The build log's account of the website's explorers (src/attention_book/book/explorer.py).

Usage: python scripts/explorers.py FRAMES_DIR

When the website is built, every explorer draws each setting of its controls' grids
and writes a manifest to FRAMES_DIR (``ATTENTION_BOOK_FRAMES``). This prints, per
explorer, how many settings and distinct images it made, their size, how many of the
images carry a phone copy (drawn for a 390 px phone's column, issue 38; files of the site,
loaded by a phone for the frame on show, so they add nothing to a page's weight) and their
size, the time they took, and the totals.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(frames: str) -> int:
    records = sorted(Path(frames).glob("*.json"))
    if not records:
        print(f"explorers: no manifests in {frames} (no explorer ran in static mode)")
        return 0
    print(f"{'explorer':<18} {'settings':>8} {'images':>7} {'kB':>7} {'phone':>6} {'kB':>6} {'seconds':>8}  grid")
    total = {"settings": 0, "images": 0, "bytes": 0, "phone_images": 0, "phone_bytes": 0, "seconds": 0.0}
    for path in records:
        r = json.loads(path.read_text(encoding="utf-8"))
        grid = " × ".join(f"{len(c['values'])} {c['label']}" for c in r["controls"])
        r.setdefault("phone_images", 0)  # manifests written before phone copies existed
        r.setdefault("phone_bytes", 0)
        print(f"{r['name']:<18} {r['settings']:>8} {r['images']:>7} {r['bytes'] / 1e3:>7.0f} "
              f"{r['phone_images']:>6} {r['phone_bytes'] / 1e3:>6.0f} {r['seconds']:>8.1f}  {grid}")
        for key in total:
            total[key] += r[key]
    print(f"{'total':<18} {total['settings']:>8} {total['images']:>7} {total['bytes'] / 1e3:>7.0f} "
          f"{total['phone_images']:>6} {total['phone_bytes'] / 1e3:>6.0f} {total['seconds']:>8.1f}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
