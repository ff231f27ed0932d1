"""Print `tick N of COUNT` every `every` seconds."""

import json
import os
import time

args = json.loads(os.environ.get("SKILLFLEET_ARGS", "{}"))
count = int(args.get("count", 5))
every = float(args.get("every", 1))
for n in range(1, count + 1):
    print(f"tick {n} of {count}", flush=True)
    if n < count:
        time.sleep(every)
