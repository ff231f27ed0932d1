"""A long-running process's start-up heap: not collected while it is made, left out of garbage
collection once the process has started (the API's gunicorn processes, every Celery worker,
beat, `up` and `mcp`). A module of its own: a worker that imported it from the API's serving
module would load uvicorn and gunicorn's worker class too."""

from __future__ import annotations

import gc


def pause_collection() -> None:
    """No garbage collection until `freeze_startup_heap` (or `gc.enable`).

    A start is mostly imports and set-up, which make objects that live as long as the process
    and almost no garbage; the collector walked them again and again as they were made (some
    320 collections, two of them full, in a control worker's start). Paused, a control
    worker's start took 0.94 s of CPU instead of 1.15 s. Every process that pauses it resumes
    it once it has started, or exits first.
    """
    gc.disable()


def freeze_startup_heap() -> None:
    """Leave the objects a long-running process made while starting out of garbage collection,
    and collect what it makes from here on.

    Imports and set-up leave about 150,000 objects in an API worker and 205,000 in a node
    worker, all living as long as the process, and every full pass of the collector walked them
    all: 93 ms in an API worker and 152 ms in a node worker, each once in the first 1,000 runs
    after warm-up, a pause for whoever was waiting on that process. Frozen, they are never
    walked again (a full pass then walks a few thousand objects); what the process makes later
    is collected as before.
    """
    gc.freeze()
    gc.enable()
