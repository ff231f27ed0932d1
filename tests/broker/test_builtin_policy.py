"""The built-in policy gives the verdicts of seeds 000 and 003."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.policy import CallFacts, Decision, Policy, load_builtin_policy
from broker.tiers import SCRIPT_TIERS, Tier

POLICY = load_builtin_policy()
SKILL_TOOLS = ["load_skill", "activate_skill", "read_skill_resource", "load_skill_resource"]
NAMED_TOOLS = [*SKILL_TOOLS, "run_skill_script", "draft_skill", "edit_skill"]

# One call per rule that this rule, and no higher one, decides.
VERDICTS: list[tuple[str, CallFacts, str]] = [
    ("turn-call-limit", CallFacts("list_nodes", "read", calls_this_turn=51), "deny"),
    (
        "disabled-skills-never-run",
        CallFacts("run_skill_script", "read", skill_enabled=False),
        "deny",
    ),
    (
        "drafts-never-touch-reviewed-skills",
        CallFacts("draft_skill", "draft", skill_locked=True),
        "deny",
    ),
    ("skill-edit-plan-mode", CallFacts("edit_skill", "skill-edit", mode="plan"), "deny"),
    ("skill-edit-chats-only", CallFacts("edit_skill", "skill-edit", in_job=True), "deny"),
    ("plan-mode-changes-nothing", CallFacts("request_secret", "secret", mode="plan"), "deny"),
    (
        "skill-edit-always-asks",
        CallFacts("edit_skill", "skill-edit", granted=True),
        "require_approval",
    ),
    ("job-granted", CallFacts("delete_app", "destructive", in_job=True, job_granted=True), "allow"),
    (
        "destructive-always-asks",
        CallFacts("delete_app", "destructive", owner_allowed=True),
        "require_approval",
    ),
    ("drafts-allowed", CallFacts("mark_chats_reviewed", "draft"), "allow"),
    ("change-allowed", CallFacts("app_action", "change", owner_allowed=True), "allow"),
    ("change-asks", CallFacts("install_catalog_app", "change"), "require_approval"),
    ("web-allowed-hosts", CallFacts("read_web_page", "web", granted=True), "allow"),
    ("web-asks", CallFacts("read_web_page", "web"), "require_approval"),
    ("registry-job-granted", CallFacts("query_registry", "registry", job_granted=True), "allow"),
    ("registry-asks", CallFacts("query_registry", "registry", granted=True), "require_approval"),
    ("secret-card-is-consent", CallFacts("request_secret", "secret"), "allow"),
    ("read-runs", CallFacts("list_skills", "read", in_job=True), "allow"),
]


@pytest.mark.parametrize(("rule", "facts", "action"), VERDICTS, ids=[v[0] for v in VERDICTS])
def test_each_builtin_rule_gives_its_verdict(rule: str, facts: CallFacts, action: str) -> None:
    assert POLICY.decide(facts) == Decision(action, rule)


def test_every_builtin_rule_has_a_verdict_test() -> None:
    assert [rule.name for rule in POLICY.rules] == [name for name, _, _ in VERDICTS]


def test_a_chat_grant_never_lets_a_destructive_call_run_in_a_chat() -> None:
    # Seed 003: destructive tools always ask in a chat; only a job's grant lets one run.
    facts = CallFacts("run_command", "destructive", granted=True)

    assert POLICY.decide(facts) == Decision("require_approval", "destructive-always-asks")


def test_the_builtin_policy_denies_by_default() -> None:
    assert POLICY.default_action == "deny"


@pytest.mark.parametrize("tool", SKILL_TOOLS)
def test_a_disabled_skill_is_not_loaded_under_either_tool_name(tool: str) -> None:
    facts = CallFacts(tool, "read", skill_enabled=False)

    assert POLICY.decide(facts) == Decision("deny", "disabled-skills-never-run")


def test_a_change_call_granted_for_the_job_runs() -> None:
    facts = CallFacts("run_backup", "change", in_job=True, job_granted=True)

    assert POLICY.decide(facts) == Decision("allow", "change-allowed")


def test_a_chat_grant_does_not_let_a_destructive_call_run_in_a_job() -> None:
    facts = CallFacts("node_action", "destructive", in_job=True, granted=True)

    assert POLICY.decide(facts) == Decision("require_approval", "destructive-always-asks")


def test_a_read_call_still_runs_in_plan_mode() -> None:
    assert POLICY.decide(CallFacts("read_logs", "read", mode="plan")).action == "allow"


def test_fifty_calls_in_a_turn_are_allowed_and_the_fifty_first_is_not() -> None:
    assert POLICY.decide(CallFacts("list_nodes", "read", calls_this_turn=50)).action == "allow"
    assert POLICY.decide(CallFacts("list_nodes", "read", calls_this_turn=51)).action == "deny"


def test_skill_scripts_may_only_declare_read_change_or_destructive() -> None:
    assert {str(tier) for tier in SCRIPT_TIERS} == {"read", "change", "destructive"}


tiers = st.sampled_from([str(tier) for tier in Tier])
tools = st.sampled_from([*NAMED_TOOLS, "list_nodes", "delete_app", "read_web_page", "x"])


@st.composite
def call_facts(draw: st.DrawFn, tier: st.SearchStrategy[str] = tiers) -> CallFacts:
    return CallFacts(
        tool=draw(tools),
        tier=draw(tier),
        mode=draw(st.sampled_from(["execute", "plan"])),
        in_job=draw(st.booleans()),
        granted=draw(st.booleans()),
        job_granted=draw(st.booleans()),
        owner_allowed=draw(st.booleans()),
        skill_enabled=draw(st.booleans()),
        skill_locked=draw(st.booleans()),
        target_is_draft=draw(st.booleans()),
        calls_this_turn=draw(st.integers(min_value=0, max_value=200)),
    )


def first_match(policy: Policy, facts: CallFacts) -> Decision:
    """The decision read off explain(), one rule at a time: the reference for decide()."""
    for name, matched in policy.explain(facts):
        if matched:
            return Decision(next(r.action for r in policy.rules if r.name == name), name)
    return Decision(policy.default_action, None)


@given(call_facts())
def test_decide_agrees_with_evaluating_the_rules_one_at_a_time(facts: CallFacts) -> None:
    assert POLICY.decide(facts) == first_match(POLICY, facts)


@given(call_facts(st.sampled_from(["change", "destructive", "secret"])))
def test_in_plan_mode_no_change_destructive_or_secret_call_is_ever_allowed(
    facts: CallFacts,
) -> None:
    plan = CallFacts(**{**facts.as_context(), "mode": "plan"})

    assert POLICY.decide(plan).action == "deny"


@given(call_facts(st.just("destructive")))
def test_a_destructive_call_is_allowed_only_when_the_job_or_this_chat_granted_it(
    facts: CallFacts,
) -> None:
    # The one exception to "destructive always asks" outside a job grant: the owner answered
    # "approve for this chat" for exactly this grant key, and the call is in that chat.
    chat_granted = facts.granted and not facts.in_job
    if POLICY.decide(facts).action == "allow":
        assert facts.job_granted or chat_granted


@given(call_facts(), st.text().filter(lambda t: t not in set(Tier)))
def test_an_unknown_tier_on_a_tool_no_rule_names_is_denied_by_default(
    facts: CallFacts, tier: str
) -> None:
    unknown = CallFacts(**{**facts.as_context(), "tool": "some_new_tool", "tier": tier})

    expected = "turn-call-limit" if facts.calls_this_turn > 50 else None
    assert POLICY.decide(unknown) == Decision("deny", expected)


@given(call_facts())
def test_edit_skill_is_never_allowed_without_asking(facts: CallFacts) -> None:
    edit = CallFacts(**{**facts.as_context(), "tool": "edit_skill", "tier": "skill-edit"})

    assert POLICY.decide(edit).action in {"deny", "require_approval"}


@given(call_facts())
def test_more_than_fifty_calls_in_a_turn_are_always_denied(facts: CallFacts) -> None:
    busy = CallFacts(**{**facts.as_context(), "calls_this_turn": 51 + facts.calls_this_turn})

    assert POLICY.decide(busy) == Decision("deny", "turn-call-limit")
