"""The policy engine: loading, refusing bad documents, ordering, failing closed."""

import itertools
from dataclasses import replace
from pathlib import Path

import pytest
import structlog

from broker.errors import PolicyError
from broker.policy import KNOWN_VERDICTS, CallFacts, Decision, Policy, load_builtin_policy


def policy_text(*rules: str, default: str = "deny") -> str:
    return f"default_action: {default}\nrules:\n" + "".join(rules)


def rule(name: str, condition: str, action: str = "allow", priority: object = 10) -> str:
    return (
        f"  - name: {name}\n"
        f"    condition: {condition!r}\n"
        f"    action: {action}\n"
        f"    priority: {priority}\n"
    )


def refusal(text: str) -> str:
    with pytest.raises(PolicyError) as caught:
        Policy.from_yaml(text)
    assert caught.value.code == "policy_invalid"
    assert caught.value.status == 500
    return caught.value.message


def test_a_policy_with_no_matching_rule_gives_the_default_action() -> None:
    policy = Policy.from_yaml(policy_text(rule("reads", "tier == 'read'"), default="deny"))

    assert policy.decide(CallFacts("delete_app", "destructive")) == Decision("deny", None)


def test_the_default_action_may_be_require_approval() -> None:
    policy = Policy.from_yaml(
        policy_text(default="require_approval").replace("rules:", "rules: []")
    )

    assert policy.decide(CallFacts("x", "read")) == Decision("require_approval", None)


def test_the_highest_priority_matching_rule_wins_whatever_its_place() -> None:
    policy = Policy.from_yaml(
        policy_text(
            rule("low-allow", "tier == 'change'", "allow", 10),
            rule("high-deny", "tier == 'change'", "deny", 50),
        )
    )

    assert policy.decide(CallFacts("app_action", "change")) == Decision("deny", "high-deny")


def test_rules_of_equal_priority_keep_document_order() -> None:
    policy = Policy.from_yaml(
        policy_text(
            rule("first", "tool == 'x'", "require_approval", 7),
            rule("second", "tool == 'x'", "allow", 7),
        )
    )

    assert policy.decide(CallFacts("x", "read")) == Decision("require_approval", "first")


def test_a_long_policy_is_split_into_chains_and_still_decides_by_priority() -> None:
    rules = [rule(f"tool-{i}", f"tool == 't{i}'", "allow", 1000 - i) for i in range(150)]
    policy = Policy.from_yaml(policy_text(*rules, rule("catch-all", "true", "deny", -1)))

    assert policy.decide(CallFacts("t0", "read")) == Decision("allow", "tool-0")
    assert policy.decide(CallFacts("t149", "read")) == Decision("allow", "tool-149")
    assert policy.decide(CallFacts("other", "read")) == Decision("deny", "catch-all")


def test_comments_and_comprehensions_in_a_condition_are_accepted() -> None:
    condition = "['a', 'b'].exists(name, name == tool) // a CEL comment"
    policy = Policy.from_yaml(policy_text(rule("listed", condition), rule("next", "true", "deny")))

    assert policy.decide(CallFacts("b", "read")) == Decision("allow", "listed")
    assert policy.decide(CallFacts("c", "read")) == Decision("deny", "next")


def test_a_condition_that_fails_at_call_time_denies_and_names_its_rule() -> None:
    # Division by zero only when calls_this_turn is 7, which the load-time samples don't hit.
    failing = "tool == 'boom' && 10 / (calls_this_turn - 7) > 0"
    policy = Policy.from_yaml(
        policy_text(rule("fragile", failing, "allow", 20), rule("reads", "true", "allow", 1))
    )

    with structlog.testing.capture_logs() as logs:
        decision = policy.decide(CallFacts("boom", "read", calls_this_turn=7))

    assert decision == Decision("deny", "fragile")
    assert logs[0]["event"] == "policy condition failed"
    assert logs[0]["rule"] == "fragile"


def test_a_condition_that_fails_is_judged_and_logged_again_on_every_call() -> None:
    failing = "tool == 'boom' && 10 / (calls_this_turn - 7) > 0"
    policy = Policy.from_yaml(
        policy_text(rule("fragile", failing, "allow", 20), rule("reads", "true", "allow", 1))
    )
    facts = CallFacts("boom", "read", calls_this_turn=7)

    with structlog.testing.capture_logs() as logs:
        verdicts = [policy.decide(facts) for _ in range(3)]

    assert verdicts == [Decision("deny", "fragile")] * 3
    assert [entry["event"] for entry in logs] == ["policy condition failed"] * 3


def test_a_remembered_verdict_is_the_one_the_rules_give_for_every_fact_combination() -> None:
    policy = load_builtin_policy.__wrapped__()  # its own, with no verdict remembered yet
    BOTH = (False, True)
    cases = [
        CallFacts(tool, tier, mode, in_job, granted, job_granted, owner, enabled, False, False, n)
        for tool, tier in (("run_skill_script", "change"), ("list_skills", "read"),
                           ("run_skill_script", "destructive"), ("edit_skill", "skill-edit"))
        for mode in ("execute", "plan")
        for in_job, granted, job_granted, owner, enabled in itertools.product(BOTH, repeat=5)
        for n in (1, 50, 51)
    ]  # fmt: skip
    first = [policy.decide(facts) for facts in cases]
    evaluated = [policy._evaluate(facts) for facts in cases]  # the rules, with nothing kept

    assert first == evaluated
    assert [policy.decide(facts) for facts in reversed(cases)] == evaluated[::-1]
    assert len({(d.action, d.rule) for d in evaluated}) > 5  # the cases reach many rules
    assert policy.decide(replace(cases[0], calls_this_turn=51)).rule == "turn-call-limit"


def test_a_policy_keeps_a_bounded_number_of_verdicts() -> None:
    policy = Policy.from_yaml(policy_text(rule("small", "calls_this_turn < 5000", "allow")))

    for n in range(KNOWN_VERDICTS + 10):
        assert policy.decide(CallFacts("x", "read", calls_this_turn=n)).rule == "small"

    assert len(policy._verdicts) <= KNOWN_VERDICTS
    assert policy.decide(CallFacts("x", "read", calls_this_turn=6000)) == Decision("deny", None)


def test_a_condition_that_is_not_boolean_at_call_time_denies() -> None:
    odd = "calls_this_turn == 7 ? 1 : false"
    policy = Policy.from_yaml(policy_text(rule("odd", odd, "allow", 20), rule("all", "true")))

    assert policy.decide(CallFacts("x", "read", calls_this_turn=7)) == Decision("deny", "odd")
    assert policy.decide(CallFacts("x", "read", calls_this_turn=8)) == Decision("allow", "all")


def test_explain_lists_every_rule_in_evaluation_order_with_whether_it_matches() -> None:
    policy = Policy.from_yaml(
        policy_text(
            rule("reads", "tier == 'read'", "allow", 10),
            rule("plan", "mode == 'plan'", "deny", 90),
        )
    )

    assert policy.explain(CallFacts("x", "read", mode="plan")) == [("plan", True), ("reads", True)]
    assert policy.explain(CallFacts("x", "change")) == [("plan", False), ("reads", False)]


def test_a_policy_file_is_loaded_from_disk(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(policy_text(rule("reads", "tier == 'read'")), encoding="utf-8")

    assert Policy.from_file(path).decide(CallFacts("x", "read")) == Decision("allow", "reads")


def test_a_syntax_error_refuses_the_policy_and_names_the_rule() -> None:
    message = refusal(policy_text(rule("broken", "tool ==")))

    assert message.startswith('Rule "broken": condition is not valid CEL: Syntax error')


def test_an_unknown_variable_refuses_the_policy_and_names_it() -> None:
    message = refusal(policy_text(rule("x", "tool == 'a' && foo")))

    assert message == 'Rule "x": unknown variable "foo"'


def test_an_unknown_variable_behind_a_false_branch_is_still_refused() -> None:
    message = refusal(policy_text(rule("hidden", "false && (secret_flag || tier == 'read')")))

    assert message == 'Rule "hidden": unknown variable "secret_flag"'


def test_an_unknown_function_refuses_the_policy() -> None:
    message = refusal(policy_text(rule("calls", "lookup(tool)")))

    assert message.startswith('Rule "calls": condition fails to evaluate: Undefined variable')


def test_a_condition_comparing_across_types_refuses_the_policy() -> None:
    message = refusal(policy_text(rule("typed", "tool > 1")))

    assert message.startswith('Rule "typed": condition fails to evaluate: No such overload')


def test_a_condition_that_is_not_boolean_refuses_the_policy() -> None:
    assert refusal(policy_text(rule("name", "tool"))).startswith(
        'Rule "name": condition must be true or false'
    )


def test_an_unknown_action_refuses_the_policy() -> None:
    message = refusal(policy_text(rule("x", "true", action="maybe")))

    assert message == "Rule \"x\": unknown action 'maybe'"


def test_an_unknown_default_action_refuses_the_policy() -> None:
    message = refusal(policy_text(rule("x", "true"), default="permit"))

    assert message == "default_action: unknown action 'permit'"


def test_a_duplicate_rule_name_refuses_the_policy() -> None:
    message = refusal(policy_text(rule("same", "true"), rule("same", "false")))

    assert message == 'Rule "same": duplicate rule name'


@pytest.mark.parametrize("missing", ["condition", "action", "priority"])
def test_a_rule_missing_a_field_refuses_the_policy(missing: str) -> None:
    text = "".join(
        line for line in rule("partial", "true").splitlines(True) if f"{missing}:" not in line
    )

    assert refusal(policy_text(text)) == f"Rule \"partial\": missing field '{missing}'"


def test_a_rule_without_a_name_refuses_the_policy_and_gives_its_position() -> None:
    text = policy_text(rule("ok", "true"), "  - condition: 'true'\n    action: deny\n")

    assert refusal(text) == "Rule #2: missing field 'name'"


@pytest.mark.parametrize("priority", ["high", "1.5", "true"])
def test_a_non_integer_priority_refuses_the_policy(priority: str) -> None:
    message = refusal(policy_text(rule("p", "true", priority=priority)))

    assert message == 'Rule "p": priority must be an integer'


def test_a_condition_that_is_not_a_string_refuses_the_policy() -> None:
    text = policy_text("  - name: n\n    condition: true\n    action: allow\n    priority: 1\n")

    assert refusal(text) == 'Rule "n": condition must be a string'


def test_an_unknown_rule_field_refuses_the_policy() -> None:
    text = policy_text(rule("extra", "true") + "    effect: allow\n")

    assert refusal(text) == "Rule \"extra\": unknown field 'effect'"


@pytest.mark.parametrize("text", ["- a\n- b\n", "just text", "", "42"])
def test_a_document_that_is_not_a_mapping_refuses_the_policy(text: str) -> None:
    assert "a policy must be a mapping" in refusal(text)


def test_a_document_without_rules_refuses_the_policy() -> None:
    assert refusal("default_action: deny\n") == "<policy>: missing field 'rules'"


def test_a_document_that_is_not_yaml_refuses_the_policy() -> None:
    assert refusal("rules: [\n").startswith("<policy>: not valid YAML")


def test_a_condition_nested_too_deeply_to_combine_refuses_the_policy() -> None:
    # 95 parentheses still compile alone; the parser's limit is hit once the rule is combined.
    deep = "(" * 95 + "true" + ")" * 95

    assert refusal(policy_text(rule("deep", deep))) == 'Rule "deep": condition is nested too deeply'


def test_a_policy_whose_aliases_multiply_is_refused_before_any_rule_is_read() -> None:
    # Nine levels of ten aliases: a billion values, which an error message would print.
    lines = ["      a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"      a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 10) + "]" for n in range(1, 9)]
    text = policy_text(rule("bomb", "true")).replace(
        "action: allow", "action:\n" + "\n".join(lines)
    )

    assert refusal(text) == (
        "<policy>: too large to read: with its aliases written out it holds more than "
        "10,000 values."
    )


def test_a_policy_nested_thousands_deep_is_refused_as_too_large() -> None:
    assert refusal("rules: " + "[" * 5000 + "]" * 5000) == (
        "<policy>: too large to read: it nests deeper than 32 levels."
    )
