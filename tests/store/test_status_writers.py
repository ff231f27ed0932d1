"""Only store/lifecycle/ writes a `status` column: a scan of the source tree finds every other
write (an attribute set, `status=` in an UPDATE's or a row's values, `"status":` in a dict of
values), and a self-test proves the scan sees each form."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("api", "broker", "relay", "skillfleet", "store", "workers")
# The state machines' own home: the only writers.
HOME = ("store/lifecycle/", "store/states.py")
# Rows are built by these (a model's constructor, `transient`) and changed by `.values`.
MODELS = {"ToolCall", "Run", "JobRun", "Turn", "Approval", "EditPlan"}
WRITERS = {"values", "transient", "insert", "insert_row", "update", "execute", "new"} | MODELS
# `x.update(status=…)` is a dict's update (a step's outcome), not SQL: `update` counts bare only.
DICT_METHODS = {"update"}
# Attributes named `status` that are not a state machine's column, with why.
NOT_A_COLUMN = {
    ("api/errors.py", "self.status"): "an API error's HTTP status",
    ("workers/runners/egress_proxy.py", "self.status"): "the egress proxy's HTTP refusal",
}


@dataclass(frozen=True)
class Write:
    path: str
    line: int
    form: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.form}"


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _writer(func: ast.expr) -> str | None:
    """The writer a call names, if it is one."""
    if isinstance(func, ast.Attribute) and func.attr in DICT_METHODS:
        return None
    name = _name(func)
    return name if name in WRITERS else None


def _is_status_key(key: ast.expr | None) -> bool:
    if isinstance(key, ast.Constant) and key.value == "status":
        return True
    return isinstance(key, ast.Attribute) and key.attr == "status"  # {Run.status: ...}


def _has_status(node: ast.expr) -> bool:
    return isinstance(node, ast.Dict) and any(_is_status_key(key) for key in node.keys)


class _Scan(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.found: list[Write] = []
        self.scopes: list[set[str]] = [set()]  # names handed to a writer, per function

    def _add(self, node: ast.AST, form: str) -> None:
        self.found.append(Write(self.path, getattr(node, "lineno", 0), form))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        handed: set[str] = set()
        for inner in ast.walk(node):
            if isinstance(inner, ast.Call) and _writer(inner.func):
                handed |= {a.id for a in inner.args if isinstance(a, ast.Name)}
                handed |= {k.value.id for k in inner.keywords if isinstance(k.value, ast.Name)}
        self.scopes.append(handed)
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def _targets(self, targets: list[ast.expr], value: ast.expr | None) -> None:
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr == "status":
                shown = f"{ast.unparse(target)}"
                if (self.path, shown) not in NOT_A_COLUMN:
                    self._add(target, f"{shown} = …")
            elif isinstance(target, ast.Subscript) and _is_status_key(target.slice):
                if _name(target.value) in self.scopes[-1]:
                    self._add(target, f'{ast.unparse(target.value)}["status"] = …')
            elif isinstance(target, ast.Name) and value is not None and _has_status(value):
                if target.id in self.scopes[-1]:
                    self._add(target, f'{target.id} = {{"status": …}}')
            elif isinstance(target, ast.Tuple | ast.List):
                self._targets(list(target.elts), None)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._targets(node.targets, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._targets([node.target], node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._targets([node.target], None)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _name(node.func) == "setattr" and len(node.args) > 1:
            if isinstance(node.args[1], ast.Constant) and node.args[1].value == "status":
                self._add(node, 'setattr(…, "status", …)')
        for keyword in node.keywords:  # a helper handed a new state: _move(…, status=X.Y)
            value = keyword.value
            if keyword.arg == "status" and isinstance(value, ast.Attribute):
                if (_name(value.value) or "").endswith("Status"):
                    self._add(node, f"{_name(node.func)}(status={ast.unparse(value)})")
        called = _writer(node.func)
        if called:
            if any(k.arg == "status" for k in node.keywords):
                self._add(node, f"{called}(status=…)")
            for argument in [*node.args, *(k.value for k in node.keywords if k.arg is None)]:
                if _has_status(argument):
                    self._add(node, f'{called}({{"status": …}})')
        self.generic_visit(node)


def status_writes(source: str, path: str) -> list[Write]:
    scan = _Scan(path)
    scan.visit(ast.parse(source))
    return scan.found


def test_no_status_is_written_outside_the_state_machines():
    found: list[Write] = []
    for package in PACKAGES:
        for file in sorted((ROOT / package).rglob("*.py")):
            path = file.relative_to(ROOT).as_posix()
            if path.startswith(HOME):
                continue
            found += status_writes(file.read_text(encoding="utf-8"), path)
    assert [str(write) for write in found] == []


def test_the_state_machines_home_is_where_the_writes_are():
    writes = [
        write
        for file in sorted((ROOT / "store" / "lifecycle").glob("*.py"))
        for write in status_writes(file.read_text(encoding="utf-8"), file.name)
    ]
    assert {write.path for write in writes} >= {
        "approvals.py",
        "calls.py",
        "editplans.py",
        "jobruns.py",
        "runs.py",
        "turns.py",
    }


WRITES = """
def every_form(session, run, call, plan, values, extra):
    run.status = "failed"
    call.status: str = "done"
    plan.status += "x"
    run.status, other = "a", 1
    setattr(run, "status", "failed")
    session.execute(update(Run).values(status="failed"))
    session.execute(update(Run).values({"status": "failed"}))
    session.execute(update(Run).values({Run.status: "failed"}))
    made = Run(id="r", status="queued")
    made = transient(Run, {"id": "r", "status": "queued"})
    changes = {"status": "failed", "error": "x"}
    session.execute(update(Run).values(**changes))
    extra["status"] = "failed"
    session.execute(update(Run).values(extra))
    insert_row(session, {"status": "queued"})
    _move(session, run.id, status=JobRunStatus.FAILED)
"""

NOT_WRITES = """
def reads_and_events(session, run, outcome, client):
    if run.status == "failed" or run.status in ("a", "b"):
        pass
    select(Run).where(Run.status == "queued")
    outcome.update(status="done", calls=2)
    event = {"status": run.status, "exit_code": 0}
    client.xadd("stream", event)
    log.info("run ended", status=run.status)
    shown = {"status": "failed"}
    return shown
"""


def test_the_scan_sees_every_form_of_a_status_write():
    forms = [write.form for write in status_writes(WRITES, "example.py")]
    assert forms == [
        "run.status = …",
        "call.status = …",
        "plan.status = …",
        "run.status = …",
        'setattr(…, "status", …)',
        "values(status=…)",
        'values({"status": …})',
        'values({"status": …})',
        "Run(status=…)",
        'transient({"status": …})',
        'changes = {"status": …}',
        'extra["status"] = …',
        'insert_row({"status": …})',
        "_move(status=JobRunStatus.FAILED)",
    ]


def test_the_scan_leaves_reads_events_and_logs_alone():
    assert status_writes(NOT_WRITES, "example.py") == []


def test_an_http_status_of_an_error_is_not_a_state():
    source = "class ApiError:\n    def __init__(self, status):\n        self.status = status\n"
    assert status_writes(source, "api/errors.py") == []
    assert [w.form for w in status_writes(source, "api/other.py")] == ["self.status = …"]
