"""A stand-in for hyperlight-sandbox, for hosts whose KVM can't run Hyperlight micro-VMs.

Only the KVM edge is replaced: the worker, its micro-VM child processes, the pool, the folders
and the guest programs are the real ones. The stand-in's "micro-VM" runs a Python guest program
in the child process itself, with the guest's preopens mapped to their host folders (`/input`
and `/output` in the program's text), and keeps Hyperlight's file rules that the worker relies
on: `/output` loses its top-level files before each run and at each restore, and nothing else
(a folder the guest made there would stay). A run can't be interrupted, as Hyperlight's can't.
"""

from __future__ import annotations

from pathlib import Path

STAND_IN_HYPERLIGHT = """
import contextlib, io, os, types


class Sandbox:
    def __init__(self, *, input_dir=None, output_dir=None, temp_output=False, **options):
        self.tools = {}
        self.input_dir, self.output_dir = input_dir, output_dir

    def register_tool(self, name, tool):
        self.tools[name] = tool

    def allow_domain(self, domain):
        pass

    def run(self, program):
        self._clear_output()
        if self.input_dir is not None:
            program = program.replace('"/input/', '"' + self.input_dir + '/')
        if self.output_dir is not None:
            program = program.replace('"/output"', '"' + self.output_dir + '"')
        names = dict(self.tools, http_get=None, http_post=None)
        names["call_tool"] = lambda name, **arguments: self.tools[name](**arguments)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            exec(program, names)
        return types.SimpleNamespace(stdout=out.getvalue(), stderr=err.getvalue(), exit_code=0)

    def snapshot(self):
        return None

    def restore(self, snapshot):
        self._clear_output()

    def _clear_output(self):
        if self.output_dir is not None:
            for entry in os.scandir(self.output_dir):
                if entry.is_file(follow_symlinks=False):
                    os.unlink(entry.path)
"""


def write_stand_in(folder: Path) -> Path:
    """`folder` with the stand-in as `hyperlight_sandbox`, to put first on a child's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hyperlight_sandbox.py").write_text(STAND_IN_HYPERLIGHT)
    return folder
