"""Print the size, use and free space of the file system holding `path`, as JSON."""

import json
import os
import shutil

args = json.loads(os.environ.get("SKILLFLEET_ARGS", "{}"))
path = args.get("path", "/")
usage = shutil.disk_usage(path)
gib = 1024**3
print(
    json.dumps(
        {
            "path": path,
            "total_gib": round(usage.total / gib, 1),
            "used_gib": round(usage.used / gib, 1),
            "free_gib": round(usage.free / gib, 1),
            "used_percent": round(100 * usage.used / usage.total, 1),
        }
    )
)
