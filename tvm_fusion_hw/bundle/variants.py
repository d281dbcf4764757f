"""Extra named variants of a bundle: one model built by the hardware-aware pipeline with given knobs.

Written ``NAME:MODEL:KEY=VALUE,KEY=VALUE`` (``tvm-fusion-hw bundle --variant``), e.g.
``eltwise5_split:eltwise5:max_depth=1`` or
``dw_pw_pair:dw_pw:pair_templates=conv->window+depthwise_conv->pointwise_conv``.
Keys are fields of :class:`tvm_fusion_hw.PolicyConfig`, plus ``schedules`` (of ``get_pipeline``:
``true``, ``false`` or ``+``-separated template names, e.g. ``schedules=RowReduction+ConvPool``
to leave every other template's kernels to dlight). A value takes the type of the knob's default:
``true``/``false``, a number, or ``+``-separated names for a tuple (``none``: the package default).

The proof by emulated limits (issue 15) adds three knobs, see :mod:`.emulation`:
``fusion_profile=P`` (fuse as profile P decides; the build is still for the bundle's target),
``limits=P`` (build for the bundle's GPU with P's per-block and per-SM limits: the target's
``max_shared_memory_per_block`` and ``max_threads_per_block``, the templates' occupancy and
launch bounds, and registers per thread capped at what P's register file allows the kernel's
block and planned residency, through ``tirx.max_registers``, i.e. ``__maxnreg__``) and
``max_registers=N`` (a register cap per thread for every kernel, alone or with ``limits``).
Both P must be NVIDIA profiles (the bundle's runner runs CUDA).

``RULE.FIELD=VALUE`` changes one field of a schedule template's search bounds for the variant
(:mod:`tvm_fusion_hw.schedules.base.config_changes`), e.g. ``ImplicitGemm.long_step_slowdown=0.3``:
a cost-model change timed against the default build in one bundle. The field must be a number, a
``true``/``false``, or a ``+``-separated tuple of numbers or of shapes
(``ImplicitGemm.wide_micro_shapes=8x16+16x8``).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Sequence

from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.fusion.policy import PolicyConfig
from tvm_fusion_hw.schedules.rules import rules_named

#: get_pipeline keywords besides PolicyConfig's fields, with their defaults
_PIPELINE_KEYS = {"schedules": True}
#: the emulation knobs (tvm_fusion_hw.bundle.emulation) with their defaults: not get_pipeline's
EMULATION_KEYS = {"fusion_profile": None, "limits": None, "max_registers": 0}
#: knobs that hold Python objects, not text
_NOT_FROM_TEXT = {"split_groups"}
#: names the runner already uses for libraries, PyTorch columns and errors
RESERVED = {"stock", "hw", "stock_graph", "hw_graph", "eager", "compile", "compile_graphs", "torch"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclasses.dataclass(frozen=True)
class VariantSpec:
    """A named build of ``model`` with ``get_pipeline(target, **knobs)``."""

    name: str
    model: str
    knobs: Dict[str, object]

    def to_json(self) -> Dict[str, object]:
        return {"name": self.name, "model": self.model, "knobs": dict(self.knobs)}


def _defaults() -> Dict[str, object]:
    out = {**_PIPELINE_KEYS, **EMULATION_KEYS}
    for field in dataclasses.fields(PolicyConfig):
        if field.name not in _NOT_FROM_TEXT:
            out[field.name] = field.default if field.default is not dataclasses.MISSING \
                else field.default_factory()  # type: ignore[misc]
    return out


def _rule_config_default(spec: str, key: str) -> object:
    """The default of ``RULE.FIELD``'s field (a rule's ``Config``), or a one-line error."""
    rule_name, _, field = key.partition(".")
    try:
        (rule,) = rules_named([rule_name])
    except FusionHWError as err:
        raise FusionHWError(f"--variant {spec!r}: {err}") from None
    fields = {f.name: f for f in dataclasses.fields(rule.Config)}
    if field not in fields:
        raise FusionHWError(f"--variant {spec!r}: {rule_name}.Config has no field {field!r} "
                            f"(fields: {', '.join(sorted(fields))})")
    found = fields[field]
    default = found.default if found.default is not dataclasses.MISSING else found.default_factory()  # type: ignore[misc]
    if isinstance(default, tuple) and not all(isinstance(v, (int, float)) or _is_shape(v) for v in default):
        raise FusionHWError(f"--variant {spec!r}: {key} holds tuples; only numbers, booleans, "
                            "tuples of numbers and of shapes can be changed here")
    return default


def _is_shape(value: object) -> bool:
    return isinstance(value, tuple) and all(isinstance(v, int) for v in value)


def _shape(text: str) -> List[int]:
    """``"8x16"`` -> ``[8, 16]``; ValueError for anything with fewer than two sizes."""
    sizes = [int(d) for d in text.split("x")]
    if len(sizes) < 2:
        raise ValueError(text)
    return sizes


def _rule_config_value(spec: str, key: str, text: str) -> object:
    """``text`` as ``RULE.FIELD``'s type: a tuple of numbers from ``+``-separated ones, or of
    shapes (``8x16+16x8``) where the field holds shapes (or holds nothing and the text is shapes)."""
    default = _rule_config_default(spec, key)
    if not isinstance(default, tuple):
        return _value(spec, key, text, default)
    parts = [part.strip() for part in text.split("+") if part.strip()]
    shapes = any(_is_shape(v) for v in default) or (not default and any("x" in part for part in parts))
    kind = type(default[0]) if default and not shapes else int
    try:
        if shapes:
            return [_shape(part) for part in parts]
        return [kind(part) for part in parts]
    except ValueError:
        wanted = "shapes such as 8x16" if shapes else f"{kind.__name__}s"
        raise FusionHWError(f"--variant {spec!r}: {key}={text!r}, expected {wanted} joined by '+'") from None


def _value(spec: str, key: str, text: str, default: object) -> object:
    """``text`` as the type of ``default``."""
    low = text.strip().lower()
    if key in ("fusion_profile", "limits"):
        from .emulation import check_emulation_profile  # pylint: disable=import-outside-toplevel
        try:
            return check_emulation_profile(text.strip(), key)
        except FusionHWError as err:
            raise FusionHWError(f"--variant {spec!r}: {err}") from None
    if key == "max_registers" and not (text.strip().isdigit() and 0 <= int(text) <= 255):
        raise FusionHWError(f"--variant {spec!r}: max_registers={text!r}, expected 0 (none) to 255")
    if key == "schedules" and low not in ("true", "1", "yes", "on", "false", "0", "no", "off"):
        names = [name for name in text.split("+") if name]
        try:
            rules_named(names)
        except FusionHWError as err:
            raise FusionHWError(f"--variant {spec!r}: {err}") from None
        return names
    try:
        if isinstance(default, bool):
            if low in ("true", "1", "yes", "on"):
                return True
            if low in ("false", "0", "no", "off"):
                return False
            raise ValueError
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
        if isinstance(default, str):
            return text.strip()
    except ValueError:
        kind = type(default).__name__
        raise FusionHWError(f"--variant {spec!r}: {key}={text!r}, expected {kind}") from None
    if low == "none":
        return None
    return [name for name in text.split("+") if name]  # a tuple knob (JSON keeps it as a list)


def parse_variant(spec: str) -> VariantSpec:
    """``NAME:MODEL:KEY=VALUE,...`` -> :class:`VariantSpec` (knobs checked by PolicyConfig)."""
    name, _, rest = spec.partition(":")
    model, _, body = rest.rpartition(":")  # a model name may hold one ("corpus:resnet18")
    if not model or not body.strip():
        raise FusionHWError(f"--variant {spec!r}: expected NAME:MODEL:KEY=VALUE[,KEY=VALUE...]")
    name, model, body = name.strip(), model.strip(), body.strip()
    if not _NAME.fullmatch(name) or name in RESERVED:
        raise FusionHWError(f"--variant {spec!r}: name {name!r} must be letters, digits, _ . - and not "
                            f"one of {', '.join(sorted(RESERVED))}")
    defaults, knobs = _defaults(), {}
    for item in body.split(","):
        key, eq, text = item.partition("=")
        key = key.strip()
        if eq and "." in key:
            knobs[key] = _rule_config_value(spec, key, text)
            continue
        if not eq or key not in defaults:
            known = ", ".join(sorted(defaults))
            raise FusionHWError(f"--variant {spec!r}: unknown knob {key!r} (or no '='); known: {known}, "
                                "or RULE.FIELD of a template's Config")
        knobs[key] = _value(spec, key, text, defaults[key])
    out = VariantSpec(name, model, knobs)
    try:
        PolicyConfig(**{k: v for k, v in pipeline_knobs(out).items() if k not in _PIPELINE_KEYS})
    except FusionHWError as err:
        raise FusionHWError(f"--variant {spec!r}: {err}") from None
    return out


def parse_variants(specs: Sequence[object], models: Sequence[str]) -> List[VariantSpec]:
    """Parse strings (VariantSpec passes through); names unique, models among ``models``."""
    out = [s if isinstance(s, VariantSpec) else parse_variant(str(s)) for s in specs]
    seen = set()
    for var in out:
        if var.name in seen:
            raise FusionHWError(f"--variant name {var.name!r} given twice")
        seen.add(var.name)
        if var.model not in models:
            raise FusionHWError(f"--variant {var.name!r}: model {var.model!r} is not among the bundle's "
                                f"models ({', '.join(models)})")
    return out


def pipeline_knobs(spec: VariantSpec) -> Dict[str, object]:
    """Keywords for ``get_pipeline``: tuple knobs as tuples, template names as the rules (the
    emulation knobs left out: :func:`emulation_knobs`)."""
    knobs = {k: tuple(v) if isinstance(v, list) else v for k, v in spec.knobs.items()
             if k not in EMULATION_KEYS and "." not in k}
    if isinstance(knobs.get("schedules"), tuple):
        knobs["schedules"] = rules_named(knobs["schedules"])
    return knobs


def emulation_knobs(spec: VariantSpec) -> Dict[str, object]:
    """The emulation knobs a variant sets (``fusion_profile``, ``limits``, ``max_registers``)."""
    return {k: v for k, v in spec.knobs.items() if k in EMULATION_KEYS and v not in (None, 0)}


def rule_config_changes(spec: VariantSpec) -> Dict[str, Dict[str, object]]:
    """``{rule name: {Config field: value}}`` of a variant's ``RULE.FIELD`` knobs, for
    :func:`tvm_fusion_hw.schedules.base.config_changes.config_changes`."""
    out: Dict[str, Dict[str, object]] = {}
    for key, value in spec.knobs.items():
        if "." in key:
            rule, _, field = key.partition(".")
            out.setdefault(rule, {})[field] = _frozen(value)
    return out


def _frozen(value: object) -> object:
    """A knob's value as a config holds it: JSON's lists (of lists) as tuples, hashable."""
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value
