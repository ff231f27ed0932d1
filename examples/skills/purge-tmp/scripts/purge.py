"""Delete regular files older than `days` days directly inside `folder`."""

import json
import os
import sys
import time
from pathlib import Path

args = json.loads(os.environ.get("SKILLFLEET_ARGS", "{}"))
folder = Path(args["folder"])
days = int(args["days"])
if not folder.is_absolute() or not folder.is_dir():
    print(f"{folder} is not an absolute path to a folder", file=sys.stderr)
    sys.exit(2)
cutoff = time.time() - days * 86400
purged = 0
for entry in folder.iterdir():
    if entry.is_file() and not entry.is_symlink() and entry.stat().st_mtime < cutoff:
        entry.unlink()
        purged += 1
print(f"purged {purged} files older than {days} days from {folder}")
