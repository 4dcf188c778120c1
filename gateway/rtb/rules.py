"""Rules in the filter's policy: OpenRTB attribute matches decided before any scoring.

A rule names an OpenRTB path (``site.domain``, ``device.geo.country``,
``imp.banner.w``, ``app.bundle``, ...), a match and an action::

    [rtb.rules.no-gambling]            # the table's key is the rule's name
    path = "site.domain"
    match = "in"                       # equals | in | prefix | exists | absent | range
    values = ["casino.example", "bets.example"]
    action = "drop"                    # drop | keep (unscored) | score (own threshold)
    holdback = 0.01                    # this share of matches is kept anyway, counted apart
    nbr = 7                            # the proxy's OpenRTB no-bid code for this rule's drops

Rules are tried in the order written; the first that matches decides. A
match on an ``imp.*`` path matches when any impression does; a match on a
list (``bcat``, ``site.cat``, ``regs.gpp_sid``) when any item does.

Paths are checked when the config is read, against what the parser reads
(`gateway.rtb.request`): a path no bid request can have, or one the parser
does not read, is a `ConfigError` naming the rule and the path, as is a
value of the wrong type for its path (``device.devicetype`` takes integers).
Fields the parser keeps only as present or absent (``device.ip``,
``user.id``, ``source.schain``, ``imp.banner``) take ``exists`` and
``absent``; fields it reads with OpenRTB's default when absent (``at``,
``test``, ``imp.bidfloor``, ...) take matches on their value only.

Compiled like the feature spec: one generated function per rule set reads
each path once (from a record or a view) and tests the rules in order.
This module is plain Python (a config section needs its annotations).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from gateway._config.reader import fail, section, setting
from gateway.rtb.features import _access, _steps
from gateway.rtb.request import BidRequest, Imp, Record, record_index

__all__ = [
    "ACTIONS",
    "DROP",
    "KEEP",
    "MATCHES",
    "RULE_PATHS",
    "SCORE",
    "Rule",
    "RuleSet",
    "compile_rules",
]

MATCHES: Final = ("equals", "in", "prefix", "exists", "absent", "range")
ACTIONS: Final = ("drop", "keep", "score")
DROP: Final = 0
KEEP: Final = 1
SCORE: Final = 2


@dataclass(frozen=True, slots=True)
class _Path:
    """How a rule reads one OpenRTB path: the view path, and what it holds.

    ``kind``: str, int, float, bool (a value); strs, ints (a list: any item
    matches); object, present (exists/absent only). ``imp`` paths are read
    per impression: ``read`` is then the Imp field, ``needs``/``without`` the
    format objects the impression must (not) have for the field to count.
    ``default``: the value the parser gives an absent field (no exists/absent).
    """

    read: str
    kind: str
    imp: bool = False
    needs: str = ""
    without: str = ""
    default: object = None


def _paths() -> dict[str, _Path]:
    paths: dict[str, _Path] = {
        "id": _Path("id", "str"),
        "tmax": _Path("tmax", "int"),
        "at": _Path("at", "int", default=2),
        "test": _Path("test", "bool", default=False),
        "bcat": _Path("bcat", "strs"),
        "badv": _Path("badv", "strs"),
        "cur": _Path("cur", "strs"),
        "source.schain": _Path("has_schain", "present"),
        "source.ext.schain": _Path("has_schain", "present"),
        "imp.id": _Path("id", "str", imp=True),
        "imp.bidfloor": _Path("bidfloor", "float", imp=True, default=0.0),
        "imp.bidfloorcur": _Path("bidfloorcur", "str", imp=True, default="USD"),
        "imp.instl": _Path("instl", "bool", imp=True, default=False),
        "imp.secure": _Path("secure", "bool", imp=True),
        # The parser keeps one size per impression: the banner's, else the video's.
        "imp.banner.w": _Path("w", "int", imp=True, needs="banner"),
        "imp.banner.h": _Path("h", "int", imp=True, needs="banner"),
        "imp.video.w": _Path("w", "int", imp=True, needs="video", without="banner"),
        "imp.video.h": _Path("h", "int", imp=True, needs="video", without="banner"),
        "device": _Path("device", "object"),
        "device.ip": _Path("device.has_ip", "present"),
        "device.ipv6": _Path("device.has_ip", "present"),
        "device.devicetype": _Path("device.devicetype", "int"),
        "device.connectiontype": _Path("device.connectiontype", "int"),
        "device.js": _Path("device.js", "bool"),
        "user": _Path("user", "object"),
        "user.id": _Path("user.has_id", "present"),
        "user.buyeruid": _Path("user.has_buyeruid", "present"),
        "user.yob": _Path("user.yob", "int"),
        "user.gender": _Path("user.gender", "str"),
        # OpenRTB 2.6 fields, read from their 2.5 ``ext`` places too (either spelling works).
        "user.consent": _Path("regs.consent", "str"),
        "user.ext.consent": _Path("regs.consent", "str"),
        "regs.coppa": _Path("regs.coppa", "bool", default=False),
    }
    for kind in ("banner", "video", "audio", "native"):
        paths[f"imp.{kind}"] = _Path("kinds", "present", imp=True, needs=kind)
    for name in ("ua", "os", "osv", "make", "model", "language"):
        paths[f"device.{name}"] = _Path(f"device.{name}", "str")
    for owner in ("device", "user"):
        paths[f"{owner}.geo"] = _Path(f"{owner}.geo", "object")
        for name in ("country", "region", "city"):
            paths[f"{owner}.geo.{name}"] = _Path(f"{owner}.geo.{name}", "str")
        for name in ("lat", "lon"):
            paths[f"{owner}.geo.{name}"] = _Path(f"{owner}.geo.{name}", "float")
    for inventory, third in (("site", "page"), ("app", "bundle")):
        paths[inventory] = _Path(inventory, "object")
        for name in ("id", "domain", third):
            paths[f"{inventory}.{name}"] = _Path(f"{inventory}.{name}", "str")
        paths[f"{inventory}.publisher"] = _Path(f"{inventory}.publisher", "object")
        for name in ("id", "domain"):
            paths[f"{inventory}.publisher.{name}"] = _Path(f"{inventory}.publisher.{name}", "str")
        for name in ("cat", "sectioncat", "pagecat"):
            paths[f"{inventory}.{name}"] = _Path(f"{inventory}.{name}", "strs")
    for ext in ("regs.", "regs.ext."):
        paths[f"{ext}gdpr"] = _Path("regs.gdpr", "int")
        paths[f"{ext}us_privacy"] = _Path("regs.us_privacy", "str")
        paths[f"{ext}gpp"] = _Path("regs.gpp", "str")
        paths[f"{ext}gpp_sid"] = _Path("regs.gpp_sid", "ints")
    return paths


# Every path a rule may name, as written in OpenRTB, and how it is read.
RULE_PATHS: Final[Mapping[str, _Path]] = _paths()
_VALUE_KINDS: Final = frozenset({"str", "int", "float", "bool", "strs", "ints"})
_NUMERIC_KINDS: Final = frozenset({"int", "float", "ints"})
_TEXT_KINDS: Final = frozenset({"str", "strs"})


def _check_path(path: str) -> None:
    if path in RULE_PATHS:
        return
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # the longest prefix the filter reads under
        prefix = ".".join(parts[:cut]) + "."
        near = [known for known in RULE_PATHS if known.startswith(prefix)]
        if near:
            break
    else:
        near = [known for known in RULE_PATHS if "." not in known]
    raise ValueError(
        f"no bid request field the filter reads is at {path!r} (OpenRTB 2.x paths it reads "
        f"there: {', '.join(sorted(near))})"
    )


def _what(kind: str) -> str:
    return {
        "str": "strings",
        "strs": "strings",
        "int": "integers",
        "ints": "integers",
        "float": "numbers",
        "bool": "true or false",
    }[kind]


def _fits(kind: str, value: object) -> bool:
    if kind in _TEXT_KINDS:
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind in ("int", "ints"):
        return isinstance(value, int)
    return isinstance(value, int | float) and math.isfinite(value)


@section(lambda rule: f"rtb.rules.{rule.name}")
class Rule:
    """One rule (see the module docstring); its name is its table's key."""

    name: str
    path: str = setting(check=_check_path)
    match: Literal["equals", "in", "prefix", "exists", "absent", "range"]
    # equals: `value`; in and prefix: `values`; range: `min` and/or `max` (inclusive).
    value: Any = None
    values: tuple[Any, ...] = ()
    min: float | None = None
    max: float | None = None
    action: Literal["drop", "keep", "score"] = "drop"
    threshold: float | None = setting(default=None, ge=0, le=1)  # action "score"
    holdback: float = setting(default=0.0, ge=0, le=1)
    nbr: int | None = setting(default=None, ge=0)  # action "drop": the proxy's no-bid code

    def __post_init__(self) -> None:
        read = RULE_PATHS[self.path]
        kind, match = read.kind, self.match
        self._check_operands()
        if match in ("exists", "absent"):
            if read.default is not None:
                raise fail(
                    self,
                    "match",
                    f"{self.path} reads as {read.default!r} when absent (OpenRTB's default): "
                    "match its value instead",
                )
        elif kind not in _VALUE_KINDS:
            raise fail(
                self, "match", f"the filter keeps only whether {self.path} is there: use "
                "'exists' or 'absent'"
            )  # fmt: skip
        elif match == "range" and kind not in _NUMERIC_KINDS:
            raise fail(self, "match", f"range needs numbers; {self.path} holds {_what(kind)}")
        elif match == "prefix" and kind not in _TEXT_KINDS:
            raise fail(self, "match", f"prefix needs text; {self.path} holds {_what(kind)}")
        operands = (self.value,) if match == "equals" else self.values
        for index, value in enumerate(operands):
            if not _fits(kind, value):
                where = "value" if match == "equals" else f"values[{index}]"
                raise fail(self, where, f"{self.path} takes {_what(kind)}, got {value!r}")
        if self.action == "score" and self.threshold is None:
            raise fail(self, "threshold", "required when action is 'score'")
        if self.action != "score" and self.threshold is not None:
            raise fail(self, "threshold", "only for action 'score'")
        if self.nbr is not None and self.action != "drop":
            raise fail(self, "nbr", "only for action 'drop' (the code of its no-bid answers)")

    def _check_operands(self) -> None:
        match = self.match
        if match == "equals":
            if self.value is None:
                raise fail(self, "value", "required when match is 'equals'")
        elif self.value is not None:
            raise fail(self, "value", "only for match 'equals' (in and prefix take values)")
        if match in ("in", "prefix"):
            if not self.values:
                raise fail(self, "values", f"must list at least one value for match {match!r}")
        elif self.values:
            raise fail(self, "values", f"only for match 'in' or 'prefix', not {match!r}")
        if match == "range":
            if self.min is None and self.max is None:
                raise fail(self, "min", "range needs min, max or both")
            if self.min is not None and self.max is not None and self.min > self.max:
                raise fail(self, "max", f"must be >= min ({self.min}), got {self.max}")
        elif self.min is not None or self.max is not None:
            raise fail(self, "min" if self.min is not None else "max", "only for match 'range'")


class RuleSet:
    """Rules compiled: ``match_record``/``match_view`` give the first matching rule's
    index (-1: none), and the per-index tables say what it does."""

    __slots__ = (
        "actions",
        "holdbacks",
        "match_record",
        "match_view",
        "names",
        "nbrs",
        "rules",
        "thresholds",
    )

    def __init__(self, rules: Mapping[str, Rule]) -> None:
        ordered = list(rules.values())
        self.rules = tuple(ordered)
        self.names = tuple(rule.name for rule in ordered)
        self.actions = tuple(ACTIONS.index(rule.action) for rule in ordered)
        self.thresholds = tuple(
            rule.threshold if rule.threshold is not None else 0.0 for rule in ordered
        )
        self.holdbacks = tuple(rule.holdback for rule in ordered)
        self.nbrs = tuple(rule.nbr for rule in ordered)
        self.match_record: Callable[[Record], int] = _compile(ordered, record=True)
        self.match_view: Callable[[BidRequest], int] = _compile(ordered, record=False)

    def __len__(self) -> int:
        return len(self.names)


def compile_rules(rules: Mapping[str, Rule]) -> RuleSet | None:
    """The rules ready to run (None when there are none)."""
    return RuleSet(rules) if rules else None


# --- code generation -------------------------------------------------------------------
#
# One function per rule set, straight-line code: each path is read (into a
# local) just before the first rule that needs it, so a request an early
# rule decides reads nothing more; constants are default arguments (fast
# locals, not globals). From the first ``imp.*`` rule on, the code forks:
# a request with one impression (nearly all) reads that impression's fields
# into locals; others loop over their impressions per rule.


class _Locals:
    """Locals holding what the code read so far: path -> name (copied at a fork)."""

    def __init__(self, record: bool, known: dict[str, str] | None = None) -> None:
        self.record = record
        self.known = dict(known or {})

    def fork(self) -> _Locals:
        return _Locals(self.record, self.known)

    def value(self, path: str, lines: list[str], indent: str) -> str:
        """The local holding the view path's value; the reads it needs go to ``lines``."""
        source = "r"
        names = path.split(".")
        for k, step in enumerate(_steps(path, record=self.record)):
            prefix = ".".join(names[: k + 1])
            local = self.known.get(prefix)
            if local is None:
                local = self.known[prefix] = f"n{len(self.known)}"
                lines.append(f"{indent}{local} = {_access(source, step)}")
            source = local
        return source

    def imp_value(self, read: _Path, lines: list[str], indent: str) -> str:
        key = f"imp:{read.read}:{read.needs}:{read.without}"
        local = self.known.get(key)
        if local is None:
            local = self.known[key] = f"n{len(self.known)}"
            lines.append(f"{indent}{local} = {_imp_read(read, self.record)}")
        return local


def _compile(rules: list[Rule], *, record: bool) -> Callable[[Any], int]:
    constants: dict[str, Any] = {}
    body = _emit(rules, 0, _Locals(record), constants, "", "    ")
    arguments = "".join(f", {name}={name}" for name in constants)
    source = "\n".join([f"def match(r{arguments}):", *body, "    return -1"])
    namespace = dict(constants)
    exec(compile(source, "<rtb rules>", "exec"), namespace)
    function: Callable[[Any], int] = namespace["match"]
    return function


def _emit(
    rules: list[Rule],
    start: int,
    known: _Locals,
    constants: dict[str, Any],
    imps: str,
    indent: str,
) -> list[str]:
    """Code testing ``rules[start:]`` in order. ``imps``: "" before the fork, else
    "one" (the impression is ``q``) or "many" (loop per rule)."""
    lines: list[str] = []
    for index in range(start, len(rules)):
        rule = rules[index]
        read = RULE_PATHS[rule.path]
        if not read.imp:
            local = known.value(read.read, lines, indent)
            test = _test(rule, read, local, constants, index)
            lines += [f"{indent}if {test}:", f"{indent}    return {index}"]
        elif imps == "one":
            local = known.imp_value(read, lines, indent)
            test = _test(rule, read, local, constants, index)
            lines += [f"{indent}if {test}:", f"{indent}    return {index}"]
        elif imps == "many":
            test = _test(rule, read, "x", constants, index)
            lines += [
                f"{indent}for q in {known.value('imp', lines, indent)}:",
                f"{indent}    x = {_imp_read(read, known.record)}",
                f"{indent}    if {test}:",
                f"{indent}        return {index}",
            ]
        else:
            listed = known.value("imp", lines, indent)
            inner = indent + "    "
            one, many = known.fork(), known.fork()
            lines += [f"{indent}if len({listed}) == 1:", f"{inner}q = {listed}[0]"]
            lines += _emit(rules, index, one, constants, "one", inner)
            lines += [f"{indent}else:"]
            lines += _emit(rules, index, many, constants, "many", inner)
            break
    return lines


def _field(name: str, record: bool) -> str:
    return f"q[{record_index(Imp, name)}]" if record else f"q.{name}"


def _imp_read(read: _Path, record: bool) -> str:
    kinds = _field("kinds", record)
    if read.read == "kinds":
        return f"{read.needs!r} in {kinds}"
    value = _field(read.read, record)
    if not read.needs:
        return value
    condition = f"{read.needs!r} in {kinds}"
    if read.without:
        condition += f" and {read.without!r} not in {kinds}"
    return f"({value} if {condition} else None)"


def _test(rule: Rule, read: _Path, x: str, namespace: dict[str, Any], index: int) -> str:
    """The expression that is true when ``rule`` matches the value in local ``x``."""
    kind, match = read.kind, rule.match
    listed = kind in ("strs", "ints")
    if match == "exists":
        if kind == "present":
            return x
        return f"{x}" if listed else f"{x} is not None"
    if match == "absent":
        if kind == "present":
            return f"not {x}"
        return f"not {x}" if listed else f"{x} is None"
    name = f"c{index}"
    if match == "equals":
        namespace[name] = _operand(kind, rule.value)
        return f"({x} is not None and {name} in {x})" if listed else f"{x} == {name}"
    if match == "in":
        namespace[name] = frozenset(_operand(kind, value) for value in rule.values)
        if listed:
            return f"({x} is not None and not {name}.isdisjoint({x}))"
        return f"{x} in {name}"
    if match == "prefix":
        namespace[name] = tuple(rule.values)
        if listed:
            return f"({x} is not None and any(v.startswith({name}) for v in {x}))"
        return f"({x} is not None and {x}.startswith({name}))"
    low = -math.inf if rule.min is None else rule.min
    high = math.inf if rule.max is None else rule.max
    namespace[f"lo{index}"], namespace[f"hi{index}"] = low, high
    if listed:
        return f"({x} is not None and any(lo{index} <= v <= hi{index} for v in {x}))"
    return f"({x} is not None and lo{index} <= {x} <= hi{index})"


def _operand(kind: str, value: Any) -> Any:
    return float(value) if kind == "float" else value
