"""What a skill's declared packages provide to `import`: their top-level module names.

Most distributions import under their own name (`-` and `.` read as `_`); the standard
environment's and a few common others under another (`python-docx` is `docx`, `pillow` is
`PIL`). The review warnings use it to tell an import no package provides.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from packaging.requirements import InvalidRequirement, Requirement

from store.dependencies import read_declared
from store.environment import PYTHON_PACKAGES

# Distributions that import under another name, beyond the standard environment's.
_MODULES: dict[str, tuple[str, ...]] = {
    "beautifulsoup4": ("bs4",),
    "scikit-learn": ("sklearn",),
    "scikit-image": ("skimage",),
    "opencv-python": ("cv2",),
    "opencv-python-headless": ("cv2",),
    "python-dateutil": ("dateutil",),
    "python-dotenv": ("dotenv",),
    "pymupdf": ("fitz", "pymupdf"),
    "pyjwt": ("jwt",),
    "pyserial": ("serial",),
    "attrs": ("attr", "attrs"),
    "google-api-python-client": ("googleapiclient",),
    "protobuf": ("google",),
    **{name: modules for name, modules in PYTHON_PACKAGES.items()},
}


def declared_requirements(files: Mapping[str, bytes]) -> list[str]:
    """The distribution names a skill's files declare, normalised (PEP 503), sorted; a line
    that can't be read names none (validation reports it)."""
    declared, _problems = read_declared(files)
    names = set()
    for line in declared.requirements:
        try:
            names.add(normalised(Requirement(line).name))
        except InvalidRequirement:
            continue
    return sorted(names)


def declared_modules(files: Mapping[str, bytes]) -> frozenset[str]:
    """Every top-level module the skill's declared dependencies provide."""
    return frozenset(module for name in declared_requirements(files) for module in modules_of(name))


def modules_of(distribution: str) -> tuple[str, ...]:
    """The top-level modules a distribution (by name) provides, as far as is known."""
    name = normalised(distribution)
    return _MODULES.get(name, (name.replace("-", "_"),))


def normalised(name: str) -> str:
    """A distribution name as PEP 503 compares it: lowercase, runs of `-_.` as one `-`."""
    return re.sub(r"[-_.]+", "-", name).lower()
