"""The broker's policy engine: a YAML list of CEL rules, deny by default, first match wins."""

import functools
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import cel
import structlog
import yaml

from broker.errors import PolicyError
from broker.tiers import Tier
from store.safeyaml import YamlTooLarge, load_yaml

ACTIONS = frozenset({"allow", "deny", "require_approval"})
RULE_FIELDS = ("name", "condition", "action", "priority")
# Rules per combined CEL expression; the parser refuses much deeper nesting.
CHAIN_SIZE = 32
# Verdicts a policy remembers: a verdict depends on the facts alone, and few sets of them recur.
KNOWN_VERDICTS = 4096

# The facts a condition may read, with their types. Nothing else is in scope.
VARIABLES: Mapping[str, type] = {
    "tool": str,
    "tier": str,
    "mode": str,
    "in_job": bool,
    "granted": bool,
    "job_granted": bool,
    "owner_allowed": bool,
    "skill_enabled": bool,
    "skill_locked": bool,
    "target_is_draft": bool,
    "calls_this_turn": int,
}
# CEL reports type denotations (`type(x) == string`) as identifiers; they are not variables.
_BOOLEANS = tuple(name for name, kind in VARIABLES.items() if kind is bool)
_TYPE_NAMES = frozenset({"bool", "bytes", "double", "int", "list", "map", "null_type", "string"})
_TYPE_NAMES |= {"type", "uint"}
# Names bound by comprehension macros (`list.exists(x, ...)`) are reported as identifiers too.
_BOUND = re.compile(
    r"\.\s*(?:all|exists|exists_one|existsOne|map|filter)\s*\(\s*([A-Za-z_]\w*)\s*,"
    r"(?:\s*([A-Za-z_]\w*)\s*,)?"
)
_CEL_ERROR = re.compile(r"ERROR: <input>:(\d+):(\d+): ([^\n]*)")
_STRING_LITERAL = re.compile(r"'([^'\\]*)'|\"([^\"\\]*)\"")

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class CallFacts:
    """What the broker knows about one call; the only input a policy sees."""

    tool: str
    tier: str
    mode: str = "execute"
    in_job: bool = False
    granted: bool = False
    job_granted: bool = False
    owner_allowed: bool = False
    skill_enabled: bool = True
    skill_locked: bool = False
    target_is_draft: bool = False
    calls_this_turn: int = 0

    def as_context(self) -> dict[str, Any]:
        """The facts as CEL variables."""
        return {
            "tool": self.tool,
            "tier": self.tier,
            "mode": self.mode,
            "in_job": self.in_job,
            "granted": self.granted,
            "job_granted": self.job_granted,
            "owner_allowed": self.owner_allowed,
            "skill_enabled": self.skill_enabled,
            "skill_locked": self.skill_locked,
            "target_is_draft": self.target_is_draft,
            "calls_this_turn": self.calls_this_turn,
        }


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict on a call and the rule that gave it (None: the default action)."""

    action: str
    rule: str | None


@dataclass(frozen=True)
class Rule:
    """One compiled rule."""

    name: str
    condition: str
    action: str
    priority: int
    program: cel.Program = field(repr=False, compare=False)


class Policy:
    """A loaded policy. Conditions are compiled once; `decide` evaluates them per call.

    A condition that fails to evaluate (or yields a non-boolean) fails closed: the call is
    denied and the decision names that rule.

    A verdict depends on the facts alone (CEL has no side effects and sees nothing else), so
    each set of facts is evaluated once and its verdict remembered; a call costs a dict lookup.
    """

    def __init__(self, default_action: str, rules: Sequence[Rule]) -> None:
        if default_action not in ACTIONS:
            raise PolicyError(f"default_action: unknown action {default_action!r}")
        self.default_action = default_action
        # sorted() is stable, so rules of equal priority keep document order.
        self.rules: tuple[Rule, ...] = tuple(sorted(rules, key=lambda rule: -rule.priority))
        self._chains = _chain_programs(self.rules)
        self._verdicts: dict[CallFacts, Decision] = {}

    @classmethod
    def from_yaml(cls, text: str, source: str = "<policy>") -> "Policy":
        """Parse and compile a policy document; refuse it with PolicyError if anything is off."""
        try:
            document = load_yaml(text)
        except YamlTooLarge as e:
            raise PolicyError(f"{source}: too large to read: {_first_line(e)}") from e
        except yaml.YAMLError as e:
            raise PolicyError(f"{source}: not valid YAML: {_first_line(e)}") from e
        if not isinstance(document, dict):
            raise PolicyError(f"{source}: a policy must be a mapping with default_action and rules")
        for key in ("default_action", "rules"):
            if key not in document:
                raise PolicyError(f"{source}: missing field {key!r}")
        unknown = set(document) - {"default_action", "rules"}
        if unknown:
            raise PolicyError(f"{source}: unknown field {sorted(map(str, unknown))[0]!r}")
        if not isinstance(document["rules"], list):
            raise PolicyError(f"{source}: rules must be a list")
        return cls(document["default_action"], _compile_rules(document["rules"]))

    @classmethod
    def from_file(cls, path: str | Path) -> "Policy":
        """Load a policy from a YAML file."""
        return cls.from_yaml(Path(path).read_text(encoding="utf-8"), source=str(path))

    def decide(self, facts: CallFacts) -> Decision:
        """The verdict of the first matching rule by priority, else the default action."""
        known = self._verdicts.get(facts)
        if known is not None:
            return known
        decision = self._evaluate(facts)
        if decision is None:  # a condition failed: the slow path denies, and says so each time
            return self._decide_rule_by_rule(facts)
        if len(self._verdicts) >= KNOWN_VERDICTS:
            self._verdicts.clear()
        self._verdicts[facts] = decision
        return decision

    def _evaluate(self, facts: CallFacts) -> Decision | None:
        """The chains' verdict; None when a condition failed to evaluate."""
        variables = facts.as_context()
        # Converting the facts once beats converting them for every chain.
        context = cel.Context(variables=variables) if len(self._chains) > 1 else variables
        try:
            for program in self._chains:
                index = program.execute(context)
                if index >= 0:
                    rule = self.rules[index]
                    return Decision(rule.action, rule.name)
        except Exception:  # CEL raises many types (ZeroDivisionError, KeyError, ...)
            return None
        return Decision(self.default_action, None)

    def explain(self, facts: CallFacts) -> list[tuple[str, bool]]:
        """Every rule in evaluation order and whether it matches these facts.

        A condition that fails to evaluate is reported as matching, since decide() denies there.
        """
        context = facts.as_context()
        return [(rule.name, _matches(rule, context) is not False) for rule in self.rules]

    def _decide_rule_by_rule(self, facts: CallFacts) -> Decision:
        # The slow path, taken only when some condition failed: find which, and deny there.
        context = facts.as_context()
        for rule in self.rules:
            matched = _matches(rule, context)
            if matched is None:
                log.warning("policy condition failed", rule=rule.name, tool=facts.tool)
                return Decision("deny", rule.name)
            if matched:
                return Decision(rule.action, rule.name)
        return Decision(self.default_action, None)


@functools.cache
def load_builtin_policy() -> Policy:
    """The policy shipped with skillfleet (broker/builtin_policy.yaml), read and compiled once
    a process: its document is the package's own, and a policy's verdicts depend on the facts
    alone, so the services a process builds (a test builds its own) may share it."""
    text = resources.files("broker").joinpath("builtin_policy.yaml").read_text(encoding="utf-8")
    return Policy.from_yaml(text, source="builtin_policy.yaml")


def _compile_rules(entries: list[object]) -> list[Rule]:
    rules: list[Rule] = []
    names: set[str] = set()
    for position, entry in enumerate(entries, start=1):
        rule = _compile_rule(entry, position)
        if rule.name in names:
            raise PolicyError(f'Rule "{rule.name}": duplicate rule name')
        names.add(rule.name)
        rules.append(rule)
    return rules


def _compile_rule(entry: object, position: int) -> Rule:
    if not isinstance(entry, dict):
        raise PolicyError(f"Rule #{position}: a rule must be a mapping")
    name = entry.get("name")
    if "name" not in entry:
        raise PolicyError(f"Rule #{position}: missing field 'name'")
    if not isinstance(name, str) or not name:
        raise PolicyError(f"Rule #{position}: name must be a non-empty string")
    label = f'Rule "{name}"'
    for key in RULE_FIELDS:
        if key not in entry:
            raise PolicyError(f"{label}: missing field {key!r}")
    unknown = set(entry) - set(RULE_FIELDS)
    if unknown:
        raise PolicyError(f"{label}: unknown field {sorted(unknown)[0]!r}")
    condition, action, priority = entry["condition"], entry["action"], entry["priority"]
    if not isinstance(condition, str):
        raise PolicyError(f"{label}: condition must be a string")
    if action not in ACTIONS:
        raise PolicyError(f"{label}: unknown action {action!r}")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise PolicyError(f"{label}: priority must be an integer")
    program = _compile_condition(label, condition)
    rule = Rule(name, condition, action, priority, program)
    _check_samples(label, rule)
    return rule


def _compile_condition(label: str, condition: str) -> cel.Program:
    try:
        program = cel.compile(condition)
    except Exception as e:  # parse errors are ValueError; anything else is refused the same
        raise PolicyError(f"{label}: condition is not valid CEL: {_first_line(e)}") from e
    bound = {name for match in _BOUND.finditer(condition) for name in match.groups() if name}
    for name in program.variables():
        if name not in VARIABLES and name not in _TYPE_NAMES and name not in bound:
            raise PolicyError(f'{label}: unknown variable "{name}"')
    return program


def _check_samples(label: str, rule: Rule) -> None:
    # Static checks can't see a call to an unknown function or a type error; running the
    # condition over a spread of facts catches most of those at load instead of at call time.
    for context in _sample_contexts(rule.condition):
        try:
            result = rule.program.execute(context)
        except Exception as e:  # CEL raises many types (ZeroDivisionError, KeyError, ...)
            raise PolicyError(f"{label}: condition fails to evaluate: {_first_line(e)}") from e
        if not isinstance(result, bool):
            raise PolicyError(f"{label}: condition must be true or false, not {result!r}")


def _sample_contexts(condition: str) -> Iterator[dict[str, Any]]:
    literals = {a or b for a, b in _STRING_LITERAL.findall(condition)}
    tools = sorted(literals | {"list_skills"})
    tiers = [str(tier) for tier in Tier] + ["unknown"]
    for tool, tier, mode, flag in itertools.product(tools, tiers, ("execute", "plan"), (0, 1)):
        flags = dict.fromkeys(_BOOLEANS, bool(flag))
        yield {"tool": tool, "tier": tier, "mode": mode, **flags, "calls_this_turn": 51 * flag}


def _matches(rule: Rule, context: dict[str, Any]) -> bool | None:
    """True or False, or None when the condition fails or isn't boolean."""
    try:
        result = rule.program.execute(context)
    except Exception:  # any evaluation error fails closed in decide()
        return None
    return result if isinstance(result, bool) else None


def _chain_programs(rules: Sequence[Rule]) -> list[cel.Program]:
    programs: list[cel.Program] = []
    for start in range(0, len(rules), CHAIN_SIZE):
        programs += _compile_chain(rules, start, min(len(rules), start + CHAIN_SIZE))
    return programs


def _compile_chain(rules: Sequence[Rule], start: int, stop: int) -> list[cel.Program]:
    # One CEL expression per slice of rules, yielding the index of the first matching rule or
    # -1: one evaluation per slice instead of one per rule. The CEL parser limits nesting, so
    # a slice that won't compile is split in two. Newlines end any `//` comment in a condition.
    source = " : ".join(f"(\n{rules[i].condition}\n) ? {i}" for i in range(start, stop))
    try:
        return [cel.compile(f"{source} : -1")]
    except ValueError as e:
        if stop - start == 1:
            message = f'Rule "{rules[start].name}": condition is nested too deeply'
            raise PolicyError(message) from e
        middle = (start + stop) // 2
        return _compile_chain(rules, start, middle) + _compile_chain(rules, middle, stop)


def _first_line(error: BaseException) -> str:
    """The useful part of a library error: CEL's own message and position, or the first line."""
    text = str(error).strip()
    found = _CEL_ERROR.search(text)
    if found:
        line, column, message = found.groups()
        return f"{message.strip()} (line {line}, column {column})"
    first = text.splitlines()[0] if text else type(error).__name__
    return first.split(". ")[0].rstrip(".") + "."
