"""The programs a Hyperlight guest runs around a skill's script: environment, working directory,
streaming, exit.

The working directory is `/output`, as `/work` is in a container: the program first asks the
host (the `files_in` tool) to move the call's files in, since the run itself empties `/output`
before it starts (workers/runners/vmfiles.py). The skill stays at `/input`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workers.runners.base import Job, script_environment

PYTHON_GUEST = "python_guest.path"
JAVASCRIPT_GUEST = "javascript_guest.path"
GUESTS = {".py": PYTHON_GUEST, ".js": JAVASCRIPT_GUEST, ".mjs": JAVASCRIPT_GUEST}

PYTHON_PROGRAM = """
import os as _os, runpy as _runpy, sys as _sys, traceback as _traceback

class _Stream:
    encoding = "utf-8"
    def __init__(self, name):
        self.name, self.text = name, ""
    def write(self, text):
        self.text += text
        if "\\n" in text or len(self.text) > 8192:
            self.flush()
        return len(text)
    def flush(self):
        if self.text:
            call_tool("emit", stream=self.name, text=self.text)
            self.text = ""
    def isatty(self):
        return False

def _main(job):
    out, err = _sys.stdout, _sys.stderr = _Stream("stdout"), _Stream("stderr")
    _os.environ.update(job["env"])
    path = "/input/" + job["script"]
    _sys.argv = [path, *job["argv"]]
    _sys.path.insert(0, _os.path.dirname(path))
    call_tool("files_in")
    try:
        _os.chdir("/output")
    except OSError:  # relative paths then fail loudly in the script
        pass
    code = 0
    try:
        _runpy.run_path(path, {"http_get": http_get, "http_post": http_post}, "__main__")
    except SystemExit as e:
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=err)
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    except BaseException:
        _traceback.print_exc()
        code = 1
    out.flush()
    err.flush()
    call_tool("exit", code=code)

_main(__import__("json").loads(__JOB__))
"""

# JavaScript: the source runs as an async function body with a Node-like console and process;
# read_file and write_file take paths relative to the working directory, as open() does.
JAVASCRIPT_PROGRAM = """
const __job = JSON.parse(__JOB__);
call_tool("files_in", {});
const __here = (path) => (String(path).startsWith("/") ? String(path) : "/output/" + path);
const __read = (path) => read_file(__here(path));
const __write = (path, data) => write_file(__here(path), data);
function __stream(name) {
  let text = "";
  const flush = () => { if (text) { call_tool("emit", { stream: name, text }); text = ""; } };
  const write = (chunk) => {
    text += String(chunk);
    if (text.includes("\\n") || text.length > 8192) flush();
    return true;
  };
  return { write, flush, isTTY: false };
}
const __show = (v) => {
  if (typeof v === "string") return v;
  try { return JSON.stringify(v) ?? String(v); } catch (e) { return String(v); }
};
const __line = (s) => (...args) => s.write(args.map(__show).join(" ") + "\\n");
const __out = __stream("stdout"), __err = __stream("stderr");
class __Exit { constructor(code) { this.code = code; } }
const __console = {
  log: __line(__out), info: __line(__out), error: __line(__err), warn: __line(__err),
};
const __process = {
  env: __job.env, argv: ["node", "/input/" + __job.script, ...__job.argv], exitCode: undefined,
  cwd: () => "/output", stdout: __out, stderr: __err,
  exit: (code) => { throw new __Exit(code ?? __process.exitCode ?? 0); },
};
let __code = 0;
try {
  const AsyncFunction = Object.getPrototypeOf(async function () {}).constructor;
  const main = new AsyncFunction(
    "console", "process", "read_file", "write_file", "call_tool", __job.source,
  );
  await main(__console, __process, __read, __write, call_tool);
  __code = Number(__process.exitCode ?? 0);
} catch (e) {
  if (e instanceof __Exit) __code = Number(e.code) || 0;
  else {
    __err.write(e instanceof Error ? `${e.name}: ${e.message}\\n${e.stack || ""}` : `${e}\\n`);
    __code = 1;
  }
}
__out.flush();
__err.flush();
call_tool("exit", { code: __code });
"""

WARM_UP = {PYTHON_GUEST: "import json, os, runpy, sys, traceback", JAVASCRIPT_GUEST: ""}


def guest_program(job: Job, folder: Path) -> str:
    """The code a guest runs for `job`: its environment and argv, then the script."""
    env = {k: v for k, v in script_environment(job).items() if k != "PATH"}
    payload: dict[str, Any] = {"script": job.script, "env": env, "argv": list(job.argv)}
    if GUESTS[Path(job.script).suffix] == PYTHON_GUEST:
        return PYTHON_PROGRAM.replace("__JOB__", repr(json.dumps(payload)))
    payload["source"] = (folder / job.script).read_text(encoding="utf-8")
    return JAVASCRIPT_PROGRAM.replace("__JOB__", json.dumps(json.dumps(payload)))


# -- the child process ------------------------------------------------------------------
