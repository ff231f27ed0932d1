"""Benchmark: the built-in policy's decide() against the same rules written as plain Python.

Run with `python bench/policy.py`. Prints medians over several rounds of a realistic mix of
calls, and the ratios, measured in the same run: decide() as the broker calls it (a verdict is
evaluated once per set of facts, then remembered), the CEL evaluation it remembers, and the
plain-Python baseline.
"""

import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.policy import CallFacts, Decision, load_builtin_policy  # noqa: E402

ROUNDS = 15
CALLS = 3_000
SKILL_TOOLS = {
    "load_skill",
    "activate_skill",
    "read_skill_resource",
    "load_skill_resource",
    "run_skill_script",
}
# (weight, tool, tier): roughly what one busy owner's turns call.
MIX = [
    (30, "list_skills", "read"),
    (15, "load_skill", "read"),
    (8, "read_skill_resource", "read"),
    (12, "run_skill_script", "read"),
    (10, "run_skill_script", "change"),
    (4, "run_skill_script", "destructive"),
    (4, "read_web_page", "web"),
    (2, "query_registry", "registry"),
    (3, "app_action", "change"),
    (3, "delete_app", "destructive"),
    (2, "draft_skill", "draft"),
    (2, "edit_skill", "skill-edit"),
    (1, "request_secret", "secret"),
    (1, "mystery_tool", "unknown"),
]


def baseline(f: CallFacts) -> Decision:
    """The built-in policy's rules as if/elif, for comparison."""
    rules: list[tuple[bool, str, str]] = [
        (f.calls_this_turn > 50, "deny", "turn-call-limit"),
        (f.tool in SKILL_TOOLS and not f.skill_enabled, "deny", "disabled-skills-never-run"),
        (f.tool == "draft_skill" and f.skill_locked, "deny", "drafts-never-touch-reviewed-skills"),
    ]
    for matched, action, name in rules:
        if matched:
            return Decision(action, name)
    edit, tier, plan = f.tool == "edit_skill", f.tier, f.mode == "plan"
    if edit and plan:
        return Decision("deny", "skill-edit-plan-mode")
    if edit and f.in_job:
        return Decision("deny", "skill-edit-chats-only")
    if plan and tier in ("change", "destructive", "secret"):
        return Decision("deny", "plan-mode-changes-nothing")
    if edit:
        return Decision("require_approval", "skill-edit-always-asks")
    return _by_tier(f)


def _by_tier(f: CallFacts) -> Decision:
    tier, granted = f.tier, f.granted or f.job_granted
    if tier == "destructive":
        if f.job_granted:
            return Decision("allow", "job-granted")
        return Decision("require_approval", "destructive-always-asks")
    if tier == "draft":
        return Decision("allow", "drafts-allowed")
    if tier == "change":
        if f.owner_allowed or granted:
            return Decision("allow", "change-allowed")
        return Decision("require_approval", "change-asks")
    if tier == "web":
        if granted:
            return Decision("allow", "web-allowed-hosts")
        return Decision("require_approval", "web-asks")
    if tier == "registry":
        if f.job_granted:
            return Decision("allow", "registry-job-granted")
        return Decision("require_approval", "registry-asks")
    if tier == "secret":
        return Decision("allow", "secret-card-is-consent")
    if tier == "read":
        return Decision("allow", "read-runs")
    return Decision("deny", None)


def realistic_calls(rng: random.Random) -> list[CallFacts]:
    weights = [weight for weight, _, _ in MIX]
    calls = []
    for _, tool, tier in rng.choices(MIX, weights=weights, k=CALLS):
        in_job = rng.random() < 0.3
        calls.append(
            CallFacts(
                tool,
                tier,
                mode="plan" if rng.random() < 0.1 else "execute",
                in_job=in_job,
                granted=rng.random() < 0.3,
                job_granted=in_job and rng.random() < 0.5,
                owner_allowed=rng.random() < 0.4,
                skill_enabled=rng.random() < 0.95,
                skill_locked=rng.random() < 0.2,
                calls_this_turn=min(int(rng.expovariate(1 / 8)), 60),
            )
        )
    return calls


def measure(decide: Callable[[CallFacts], Decision], calls: list[CallFacts]) -> tuple[float, ...]:
    """(p50 µs, p99 µs, decisions per second) for one round."""
    clock = time.perf_counter_ns
    latencies = []
    for facts in calls:
        start = clock()
        decide(facts)
        latencies.append(clock() - start)
    start = clock()
    for facts in calls:
        decide(facts)
    elapsed = (clock() - start) / 1e9
    cuts = statistics.quantiles(latencies, n=100)
    return cuts[49] / 1000, cuts[98] / 1000, len(calls) / elapsed


def main() -> None:
    policy = load_builtin_policy()
    calls = realistic_calls(random.Random(20250101))
    wrong = [facts for facts in calls if policy.decide(facts) != baseline(facts)]
    if wrong:
        sys.exit(f"baseline disagrees with the policy, e.g. {wrong[0]}")
    # decide() remembers each set of facts' verdict; _evaluate() is the CEL work it saves.
    results: dict[str, list[tuple[float, ...]]] = {
        "cel evaluation": [], "cel policy": [], "python if/elif": []
    }  # fmt: skip
    for _ in range(ROUNDS):
        results["cel evaluation"].append(measure(policy._evaluate, calls))  # type: ignore[arg-type]
        results["cel policy"].append(measure(policy.decide, calls))
        results["python if/elif"].append(measure(baseline, calls))
    medians = {
        name: [statistics.median(column) for column in zip(*rows, strict=True)]
        for name, rows in results.items()
    }
    print(f"policy decide(): {CALLS:,} calls x {ROUNDS} rounds, medians")
    print(f"{'implementation':<16}{'p50 µs':>10}{'p99 µs':>10}{'decisions/s':>14}")
    for name, (p50, p99, rate) in medians.items():
        print(f"{name:<16}{p50:>10.2f}{p99:>10.2f}{rate:>14,.0f}")
    plain = medians["python if/elif"]
    for name in ("cel evaluation", "cel policy"):
        cel = medians[name]
        print(f"ratio {name}/python: p50 {cel[0] / plain[0]:.1f}x, "
              f"throughput {cel[2] / plain[2]:.3f}x")  # fmt: skip


if __name__ == "__main__":
    main()
