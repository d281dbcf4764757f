"""Progress on long compiles: stage lines, and the running TVM pass on a terminal.

A ResNet-50 build takes a minute on a small machine; a user should see that it moves. Stages print
one line each with elapsed seconds to stderr. On a terminal a pass instrument also shows the pass
that is running, rewritten in place; in logs (not a TTY) only the stage lines appear.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Iterator, Optional

import tvm


@tvm.instrument.pass_instrument
class _PassTicker:
    """Rewrites one status line with the name of each top-level pass as it starts."""

    def __init__(self, stage: str):
        self.stage = stage
        self.count = 0
        self.start = time.perf_counter()

    def run_before_pass(self, _mod, info):
        self.count += 1
        elapsed = time.perf_counter() - self.start
        sys.stderr.write(f"\r  {self.stage}: pass {self.count} {info.name[:40]:<40} {elapsed:6.1f}s")
        sys.stderr.flush()


class Progress:
    """Numbered stages, each timed: ``with progress.stage("compile"): ...``."""

    def __init__(self, total: int, enabled: bool = True, stream=None):
        self.total = total
        self.done = 0
        self.enabled = enabled
        self.stream = stream or sys.stderr

    @contextlib.contextmanager
    def stage(self, title: str, instrument_passes: bool = False) -> Iterator[Optional[tvm.transform.PassContext]]:
        """Time one stage; with ``instrument_passes`` yield a PassContext showing passes live."""
        self.done += 1
        label = f"[{self.done}/{self.total}] {title}"
        start = time.perf_counter()
        if self.enabled and not self.stream.isatty():
            self.stream.write(f"{label} ...\n")
            self.stream.flush()
        ticker = _PassTicker(label) if self.enabled and self.stream.isatty() and instrument_passes else None
        outcome = "failed after"
        try:
            if ticker is not None:
                from .pipeline import extended_pass_context  # pylint: disable=import-outside-toplevel

                with extended_pass_context(instruments=[ticker]) as ctx:  # the caller's options kept
                    yield ctx
            else:
                yield None
            outcome = "done in"
        finally:
            if self.enabled:
                if ticker is not None:
                    self.stream.write("\r" + " " * 100 + "\r")
                self.stream.write(f"{label} {outcome} {time.perf_counter() - start:.1f}s\n")
                self.stream.flush()
