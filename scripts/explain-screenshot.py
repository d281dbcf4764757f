#!/usr/bin/env python3
"""Make the README's explain screenshot (docs/explain.png) the way tests/test_explain.py checks
the page: `tvm-fusion-hw explain`'s HTML rendered in headless Chromium (Debian's `chromium`,
scripts/install-system-deps.sh), here with "show only the differing decisions" switched on.

    .venv/bin/python scripts/explain-screenshot.py            # MobileNetV2, H200 vs RTX 3060, ~30 s
    .venv/bin/python scripts/explain-screenshot.py --model dw_pw --profile nvidia-h200 --profile amd-mi250x
"""

import argparse
import sys
import tempfile
from pathlib import Path

from tvm_fusion_hw.models import build

from tvm_fusion_hw.explain import explain
from tvm_fusion_hw.explain.browser import HeadlessPage, find_browser
from tvm_fusion_hw.explain.html import render_html
from tvm_fusion_hw.frontend import import_onnx


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenet_v2")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--profile", action="append", dest="profiles")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "docs" / "explain.png"))
    parser.add_argument("--width", type=int, default=1340)
    parser.add_argument("--height", type=int, default=1250, help="pixels of the page's top to keep")
    args = parser.parse_args()
    if find_browser() is None:
        print("explain-screenshot: no headless browser (apt-get install chromium)", file=sys.stderr)
        return 1
    profiles = args.profiles or ["nvidia-h200", "nvidia-rtx-3060"]
    mod = import_onnx(build(args.model, batch=args.batch), name=args.model)
    page_html = render_html(explain(mod, profiles, model=args.model, batch=args.batch))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "explain.html"
        path.write_text(page_html, encoding="utf-8")
        with HeadlessPage(width=args.width, height=900) as page:
            page.load(path)
            if page.errors:
                print(f"explain-screenshot: the page has errors: {page.errors}", file=sys.stderr)
                return 1
            page.evaluate("(b => b && b.click())(document.getElementById('only-differing'))")
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(Path(args.out), max_height=args.height)
    print(f"screenshot written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
