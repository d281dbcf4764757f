"""Command line: ``tvm-fusion-hw compile|explain|profiles|models|bundle``.

``tvm-fusion-hw compile mobilenet_v2 --profile nvidia-h200`` imports the model (a zoo name or an
ONNX file), compiles it with the hardware-aware pipeline, and prints every fusion decision with its
reason and the resulting groups; ``--feedback`` measures the kernels and splits the fused groups
that spill or lose occupancy (:mod:`.feedback`), and prints the splits. ``tvm-fusion-hw explain
MODEL --profile A --profile B`` puts the plans of several profiles side by side, with stock's
(:mod:`.explain`), as text, JSON and an HTML page. Bad input ends with one line on stderr and exit
status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

from .errors import FusionHWError


def _read_model(model: str, batch: int):
    """The ONNX model to compile (a file, checked, or a zoo model built) and the name for errors."""
    from .frontend import check_importable, load_onnx  # pylint: disable=import-outside-toplevel

    if batch < 1:
        raise FusionHWError(f"--batch must be at least 1, got {batch}")
    if model.endswith(".onnx") or os.sep in model:
        if batch != 1:
            raise FusionHWError("--batch applies to zoo models only; an ONNX file has its own shapes")
        proto = load_onnx(model)
        check_importable(proto, model)
        return proto, model
    from .models import build  # pylint: disable=import-outside-toplevel

    return build(model, batch=batch), model


def _check_output(path: str, flag: str) -> Path:
    """Refuse, before compiling, an output path that cannot be written."""
    out = Path(path)
    if out.is_dir():
        raise FusionHWError(f"{flag} {path} is a directory; name a file in it")
    folder = out.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise FusionHWError(f"{flag} {path}: {folder} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise FusionHWError(f"{flag} {path}: cannot write in {folder}")
    return out


def _write_atomically(outputs) -> None:
    """Write every ``(path, write)`` through a temporary file in its folder, then move them all
    into place: a failure leaves none of them behind (nor folders made for them)."""
    made: list[Path] = []
    staged: list[tuple] = []
    try:
        for path, write in outputs:
            missing = [p for p in [path.parent, *path.parent.parents] if not p.exists()]
            path.parent.mkdir(parents=True, exist_ok=True)
            made += reversed(missing)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
            os.close(fd)
            staged.append((tmp, path))
            write(tmp)
        for tmp, path in staged:
            os.replace(tmp, path)
        made = []
    finally:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
        for folder in reversed(made):  # deepest first
            try:
                folder.rmdir()
            except OSError:
                pass


def cmd_compile(args: argparse.Namespace) -> int:
    import tvm  # pylint: disable=import-outside-toplevel

    from . import pipeline  # pylint: disable=import-outside-toplevel
    from .frontend import import_onnx  # pylint: disable=import-outside-toplevel
    from .hardware.profile import load_profile  # pylint: disable=import-outside-toplevel
    from .hardware.target import target as make_target  # pylint: disable=import-outside-toplevel
    from .progress import Progress  # pylint: disable=import-outside-toplevel

    # bad input ends here, before any progress line or output file
    outputs = {flag: _check_output(path, flag) for flag, path in
               (("--report-json", args.report_json), ("--export", args.export)) if path}
    if len(outputs) == 2 and outputs["--report-json"].resolve() == outputs["--export"].resolve():
        raise FusionHWError("--report-json and --export name the same file")
    load_profile(args.profile)  # its errors before the model's; the target (and TVM's log lines) after
    knobs = dict(parse_knob(text) for text in args.knobs or [])
    pipeline.fusion_pass(args.profile, **knobs)  # a bad knob's one-line error, before the import
    model, name = _read_model(args.model, args.batch)
    tgt = make_target(args.profile)
    progress = Progress(total=2 + int(args.compare_stock) + int(args.schedules), enabled=not args.quiet)
    with progress.stage(f"import {args.model} (batch {args.batch})"):
        mod = import_onnx(model, name=name)
    start = time.perf_counter()
    # the plugin's PassContext options (cp.async on sm_80+), as a user's build sets them
    with pipeline.pass_context(tgt):
        if args.feedback:  # build, measure registers and occupancy, split what measures badly, rebuild
            from .feedback.split_loop import compile_with_feedback  # pylint: disable=import-outside-toplevel

            result = compile_with_feedback(mod, tgt, progress=progress, **knobs)
            ex, report = result.executable, result.report
        else:
            fuse = pipeline.fusion_pass(tgt, **knobs)
            with progress.stage(f"compile for {args.profile} with hardware-aware fusion", instrument_passes=True):
                ex = tvm.compile(mod, target=tgt, relax_pipeline=pipeline.get_pipeline(tgt, fuse_pass=fuse))
            report = fuse.report
    ours = time.perf_counter() - start
    print(report)
    if args.schedules:
        from .schedule_report import explain_schedules  # pylint: disable=import-outside-toplevel

        with progress.stage("explain the schedule of every kernel"), \
                pipeline.pass_context(tgt):
            choices = explain_schedules(mod, tgt, pipeline.fusion_pass(tgt, **knobs), rules=None)
        print("\nschedules (rule, tile, modelled time):")
        print("\n".join(f"  {c}" for c in choices))
    summary = f"\nkernels: {len(report.groups)} hardware-aware; compile {ours:.1f}s"
    if args.feedback:
        summary += f" ({len(result.rounds)} feedback round(s), {len(report.splits)} split(s))"
    if args.compare_stock:
        with progress.stage("compile with stock TVM fusion (for comparison)", instrument_passes=True):
            start = time.perf_counter()
            tvm.compile(mod, target=tgt, relax_pipeline=pipeline.stock_pipeline(tgt))
            stock = time.perf_counter() - start
        summary += f" (stock {stock:.1f}s, {len(pipeline.stock_groups(mod, tgt))} kernels)"
    print(summary)
    writes = {"--report-json": lambda tmp: Path(tmp).write_text(report.to_json()),
              "--export": ex.export_library}
    _write_atomically([(path, writes[flag]) for flag, path in outputs.items()])
    if args.report_json:
        print(f"report written to {args.report_json}")
    if args.export:
        print(f"library written to {args.export}")
    return 0


def _knob_value(text: str):
    """A knob's value from the command line: a number, true/false, a comma list, or the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return tuple(t for t in text.split(",") if t) if "," in text else text


#: how a switch may be written on the command line
_SWITCH_WORDS = {"true": True, "on": True, "yes": True, "1": True,
                 "false": False, "off": False, "no": False, "0": False}


def parse_knob(text: str):
    """``--knob NAME=VALUE`` as ``(name, value)``; a switch (a bool field) takes on/off words."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise FusionHWError(f"--knob takes NAME=VALUE (a PolicyConfig field), got '{text}'")
    from .fusion.policy import PolicyConfig  # pylint: disable=import-outside-toplevel

    field = next((f for f in dataclasses.fields(PolicyConfig) if f.name == name), None)
    if field is not None and isinstance(field.default, bool):
        if value.strip().lower() not in _SWITCH_WORDS:
            raise FusionHWError(f"--knob {name} is a switch: on or off (true/false), got '{value}'")
        return name, _SWITCH_WORDS[value.strip().lower()]
    return name, _knob_value(value)


class _ProfileAction(argparse.Action):
    """``--profile NAME``: one more column (its knobs follow it, ``--knob``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.profiles = list(namespace.profiles or []) + [(values, {})]


class _KnobAction(argparse.Action):
    """``--knob NAME=VALUE``: a PolicyConfig field for the fusion pass of the last ``--profile``."""

    def __call__(self, parser, namespace, values, option_string=None):
        name, sep, value = values.partition("=")
        if not namespace.profiles or not sep or not name:  # refused by cmd_explain, in one line
            namespace.bad_knob = f"--knob {values}: give NAME=VALUE after the --profile it applies to"
            return
        try:
            name, parsed = parse_knob(values)
        except FusionHWError as err:
            namespace.bad_knob = str(err)
            return
        namespace.profiles[-1][1][name] = parsed


def cmd_explain(args: argparse.Namespace) -> int:
    from .explain import explain, stages  # pylint: disable=import-outside-toplevel
    from .explain.html import render_html  # pylint: disable=import-outside-toplevel
    from .explain.text import render_text  # pylint: disable=import-outside-toplevel
    from .frontend import import_onnx  # pylint: disable=import-outside-toplevel
    from .fusion.policy import PolicyConfig  # pylint: disable=import-outside-toplevel
    from .hardware.profile import load_profile  # pylint: disable=import-outside-toplevel
    from .progress import Progress  # pylint: disable=import-outside-toplevel

    # bad input ends here, before any progress line or output file
    outputs = {flag: _check_output(path, flag) for flag, path in (("--json", args.json), ("--html", args.html))
               if path}
    if len(outputs) == 2 and outputs["--json"].resolve() == outputs["--html"].resolve():
        raise FusionHWError("--json and --html name the same file")
    if args.bad_knob is not None:
        raise FusionHWError(args.bad_knob)
    profiles = args.profiles or [("nvidia-h200", {})]
    for name, knobs in profiles:
        load_profile(name)
        fields = PolicyConfig.__dataclass_fields__
        unknown = sorted(set(knobs) - set(fields))
        if unknown:
            raise FusionHWError(f"unknown knob '{unknown[0]}'; known: {', '.join(fields)}")
        for knob, value in knobs.items():  # a one-name list (pair_templates=conv->window) is a tuple too
            if isinstance(value, str) and "tuple" in str(fields[knob].type).lower():
                knobs[knob] = (value,)
    model, name = _read_model(args.model, args.batch)
    progress = Progress(total=1 + stages(profiles), enabled=not args.quiet)
    with progress.stage(f"import {args.model} (batch {args.batch})"):
        mod = import_onnx(model, name=name)
    from_file = args.model.endswith(".onnx") or os.sep in args.model  # its shapes are its own
    expl = explain(mod, profiles, model=args.model, batch=None if from_file else args.batch, progress=progress)
    progress.close()
    width = args.width or shutil.get_terminal_size(fallback=(100, 24)).columns
    sys.stdout.write(render_text(expl, details=args.details, width=max(width, 40)))
    writes = {"--json": lambda tmp: Path(tmp).write_text(expl.to_json(), encoding="utf-8"),
              "--html": lambda tmp: Path(tmp).write_text(render_html(expl), encoding="utf-8")}
    _write_atomically([(path, writes[flag]) for flag, path in outputs.items()])
    for flag, path in outputs.items():
        print(f"{flag[2:]} written to {path}")
    return 0


def cmd_profiles(_args: argparse.Namespace) -> int:
    from .hardware.profile import known_profiles, load_profile  # pylint: disable=import-outside-toplevel

    for name in known_profiles():
        print(f"{name:26} {load_profile(name).summary()}")
    return 0


def cmd_models(_args: argparse.Namespace) -> int:
    from .models import input_shape, list_models  # pylint: disable=import-outside-toplevel

    for name in list_models():
        print(f"{name:22} input {input_shape(name, 1)}")
    from .models import corpus  # pylint: disable=import-outside-toplevel

    print("\n" + "\n".join(corpus.describe()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tvm-fusion-hw", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    comp = sub.add_parser("compile", help="compile a model and print the fusion decisions")
    comp.add_argument("model", help="a zoo model name (see `models`) or an .onnx file")
    comp.add_argument("--profile", default="nvidia-h200", help="hardware profile (see `profiles`)")
    comp.add_argument("--batch", type=int, default=1, help="batch size of a zoo model")
    comp.add_argument("--compare-stock", action="store_true", help="also compile with stock fusion")
    comp.add_argument("--feedback", action="store_true",
                      help="measure every kernel's registers and occupancy (ptxas / AMDGPU metadata) "
                           "and split fused groups that spill or lose occupancy, then rebuild")
    comp.add_argument("--schedules", action="store_true",
                      help="also print each kernel's schedule rule and tile (GPU targets)")
    comp.add_argument("--knob", dest="knobs", action="append", metavar="NAME=VALUE",
                      help="a fusion knob (PolicyConfig field, e.g. winograd=off); repeatable")
    comp.add_argument("--report-json", help="write the decisions as JSON here")
    comp.add_argument("--export", help="write the built library here (.so)")
    comp.add_argument("--quiet", action="store_true", help="no progress lines")
    comp.set_defaults(func=cmd_compile)
    expl = sub.add_parser("explain", help="every kernel and decision of a model's plan, profiles side by side")
    expl.add_argument("model", help="a zoo model, corpus:NAME (see `models`) or an .onnx file")
    expl.add_argument("--profile", dest="profiles", action=_ProfileAction, metavar="PROFILE",
                      help="hardware profile (repeat for several, side by side; default nvidia-h200)")
    expl.add_argument("--knob", action=_KnobAction, metavar="NAME=VALUE",
                      help="a fusion knob (PolicyConfig field) for the --profile before it")
    expl.add_argument("--batch", type=int, default=1, help="batch size of a zoo or corpus model")
    expl.add_argument("--details", action="store_true",
                      help="also every kernel's roofline, registers and schedule, every decision, stock's kernels")
    expl.add_argument("--json", help="write everything as JSON here")
    expl.add_argument("--html", help="write a self-contained page (tables, rooflines) here")
    expl.add_argument("--width", type=int, help="columns of the text (default: the terminal's)")
    expl.add_argument("--quiet", action="store_true", help="no progress bar")
    expl.set_defaults(func=cmd_explain, profiles=None, bad_knob=None)
    sub.add_parser("profiles", help="list hardware profiles").set_defaults(func=cmd_profiles)
    sub.add_parser("models", help="list zoo models and the real-model corpus").set_defaults(func=cmd_models)
    # bundle parses its own options (tvm_fusion_hw.bundle): everything after it goes there
    sub.add_parser("bundle", help="write a runtime-only benchmark bundle", add_help=False)
    return parser


def _one_line_warning(message, category, filename, lineno, file=None, line=None):  # pylint: disable=unused-argument
    """A warning as one line on stderr (a template's fallback, say), without a source excerpt."""
    print(f"warning: {message}", file=file or sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command != "bundle" and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    warnings.showwarning = _one_line_warning
    try:
        if args.command == "bundle":
            from .bundle.writer import bundle_main  # pylint: disable=import-outside-toplevel

            return bundle_main(rest)
        return args.func(args)
    except FusionHWError as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # pylint: disable=broad-except
        if args.debug:
            raise
        first = (str(err).strip().splitlines() or [""])[-1]
        print(f"{parser.prog}: error: {type(err).__name__}: {first} (run with --debug for the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
