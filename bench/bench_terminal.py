"""Terminal stripping and escaping speed (MB/s), ordinary output next to adversarial output, and the
cost the capture of a call's output pays for following escape sequences.

    python bench/bench_terminal.py [--mbytes 4]

Every input is ``--mbytes`` MB of text (fed in 64 KiB chunks for the stream column); figures are
the best of 3, in MB/s of UTF-8. The capture
line compares ``OutputCapture.add`` (which hashes every byte and follows the escape-sequence state)
with ``hashlib.sha256`` alone over the same chunks, so the ratio is the capture's overhead.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from remote_bash.framing import OutputCapture, TextCleaner, clean_text
from remote_bash.terminal import ByteTracker, escape, strip


def best(fn: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def inputs(size: int) -> dict[str, str]:
    def fill(unit: str) -> str:
        return (unit * (size // len(unit) + 1))[:size]

    return {
        "plain ASCII lines": fill("Nov 30 06:23:44 web-1 nginx[812]: GET /health 200 0.002s\n"),
        "UTF-8 text": fill("Größe: 12 МБ — 完成 ✓ 75°\n"),
        "ls --color output": fill("\x1b[01;34mdir\x1b[0m  \x1b[01;32mrun.sh\x1b[0m  file.txt\n"),
        "OSC 8 hyperlinks": fill("\x1b]8;;https://example.com/a\x1b\\link\x1b]8;;\x1b\\\n"),
        "progress with \\r": fill("  45% [#########           ]\r"),
        "ESC repeated": fill("\x1b"),
        "ESC [ repeated": fill("\x1b["),
        "ESC newline repeated": fill("\x1b\n"),
        "unterminated OSC": "\x1b]0;" + fill("A")[4:],
        "C1 controls": fill("\x9b\x85"),
        "C0 controls": fill("\x00\x01a"),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mbytes", type=float, default=4)
    args = parser.parse_args()
    size = int(args.mbytes * 1_000_000)
    print(f"{'input':24} {'strip MB/s':>11} {'stream MB/s':>12} {'clean MB/s':>11} {'escape MB/s':>12}")
    for name, text in inputs(size).items():
        mb = len(text.encode("utf-8")) / 1e6
        chunks = [text[i:i + 65536] for i in range(0, len(text), 65536)]

        def stream(chunks: list[str] = chunks) -> None:
            cleaner = TextCleaner()
            for c in chunks:
                cleaner.feed(c)

        row = [mb / best(lambda t=text: strip(t)), mb / best(stream), mb / best(lambda t=text: clean_text(t)),
               mb / best(lambda t=text: escape(t))]
        print(f"{name:24} " + " ".join(f"{v:>11.0f} " for v in row))

    total = 200_000_000
    chunk = b"x" * 65536
    count = total // len(chunk)

    def capture() -> None:
        cap = OutputCapture(limit=60000)
        for _ in range(count):
            cap.add(chunk)

    def sha_only() -> None:
        sha = hashlib.sha256()
        for _ in range(count):
            sha.update(chunk)

    def tracker() -> None:
        t = ByteTracker()
        for _ in range(count):
            t.feed(chunk)

    cap_s, sha_s, track_s = best(capture), best(sha_only), best(tracker)
    print(f"\ncapture of 200 MB in 64 KiB chunks: {200 / cap_s:.0f} MB/s; sha256 alone: {200 / sha_s:.0f} MB/s "
          f"(capture/sha256 time: {cap_s / sha_s:.3f}x); escape-state tracking alone: {200 / track_s:,.0f} MB/s")


if __name__ == "__main__":
    main()
