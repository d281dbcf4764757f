"""Progress on long compiles, drawn by rich: numbered stages and the TVM pass running now.

A ResNet-50 build takes a minute on a small machine; a user at a terminal should see that it moves
and where it is (import, fusion, scheduling, codegen). On a terminal a rich progress bar shows
the stage and, for builds, the running pass; each finished stage leaves one line with its time.
Anywhere else (a log, a pipe, a test) it prints nothing: stdout keeps the report alone.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator

import tvm
from rich.console import Console
from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as _RichProgress


@tvm.instrument.pass_instrument
class _PassTicker:
    """Shows the name of each top-level pass as it starts in the stage's description."""

    def __init__(self, update):
        self.update = update
        self.count = 0

    def run_before_pass(self, _mod, info):
        self.count += 1
        self.update(f"pass {self.count} {info.name[:40]}")


class Progress:
    """Numbered stages, each timed: ``with progress.stage("compile"): ...``.

    ``total`` may grow while it runs (the feedback loop decides how many builds it makes);
    ``enabled=False`` or a stream that is not a terminal shows nothing.
    """

    def __init__(self, total: int, enabled: bool = True, stream=None, console: Console | None = None):
        self.total = total
        self.done = 0
        self._own = None
        if console is None and stream is None and enabled and _is_terminal(sys.stderr):
            # a copy of the terminal's descriptor: the bar stays on screen while a build sends
            # TVM's C++ log (fd 2) elsewhere (tvm_fusion_hw.explain.collect)
            stream = self._own = os.fdopen(os.dup(sys.stderr.fileno()), "w")
        self.console = console or Console(file=stream, stderr=stream is None)
        self.enabled = enabled and self.console.is_terminal
        self._bar: _RichProgress | None = None
        self._task = None

    def _start(self) -> _RichProgress:
        if self._bar is None:
            self._bar = _RichProgress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                      TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                      console=self.console, transient=True)
            self._task = self._bar.add_task("", total=self.total)
            self._bar.start()
        return self._bar

    def close(self) -> None:
        """Stop drawing (also done when the last stage ends)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __del__(self):
        if self._own is not None:
            self._own.close()

    @contextlib.contextmanager
    def stage(self, title: str, instrument_passes: bool = False) -> Iterator[tvm.transform.PassContext | None]:
        """Time one stage; with ``instrument_passes`` yield a PassContext showing passes live."""
        self.done += 1
        self.total = max(self.total, self.done)
        label = f"[{self.done}/{self.total}] {title}"
        if not self.enabled:
            yield None
            return
        bar = self._start()
        bar.update(self._task, description=label, total=self.total, completed=self.done - 1)
        start = time.perf_counter()
        outcome = "failed after"
        try:
            if instrument_passes:
                from .pipeline import extended_pass_context  # pylint: disable=import-outside-toplevel

                ticker = _PassTicker(lambda text: bar.update(self._task, description=f"{label}: {text}"))
                with extended_pass_context(instruments=[ticker]) as ctx:  # the caller's options kept
                    yield ctx
            else:
                yield None
            outcome = "done in"
        finally:
            bar.update(self._task, completed=self.done)
            bar.console.print(f"{label} {outcome} {time.perf_counter() - start:.1f}s", highlight=False)
            if outcome != "done in" or self.done >= self.total:
                self.close()


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
