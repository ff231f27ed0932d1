#!/usr/bin/env bash
# The README's walk-through as one script. Start `make up` (or `skillfleet up`), paste the
# `export …` line it prints last into another terminal, then, in the project folder, run:
# bash examples/walkthrough.sh
# Its commands are the README's `$ ` lines, in the same order: tests/skillfleet/test_walkthrough.py
# checks that, runs the README's lines as printed, and runs this script, against a real
# `skillfleet up`.
set -euo pipefail
: "${SKILLFLEET_URL:?export SKILLFLEET_URL as skillfleet up prints it}"
: "${SKILLFLEET_TOKEN:?export SKILLFLEET_TOKEN as skillfleet up prints it}"
: "${SKILLFLEET_AGENT_TOKEN:?export SKILLFLEET_AGENT_TOKEN as skillfleet up prints it}"
cd "$(dirname "$0")/.."
step() { printf '\n## %s\n' "$1"; }

step "What the commands below use"
# Tool calls are what an agent makes; they use the agent token. Approvals and skills are the
# owner's: the CLI uses SKILLFLEET_TOKEN.
AGENT="Authorization: Bearer $SKILLFLEET_AGENT_TOKEN"
JSON="Content-Type: application/json"
field() { python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

step "Import the three example skills and list the store"
skillfleet skills import --replace examples/skills/ticker
skillfleet skills import --replace examples/skills/disk-report
skillfleet skills import --replace examples/skills/purge-tmp
skillfleet skills list

step "Load a skill as an agent does, read one of its files, and see a traversal refused"
curl -sS -X POST "$SKILLFLEET_URL/api/tools/load_skill" -H "$AGENT" -H "$JSON" -d '{"arguments": {"skill_name": "ticker"}, "chat_id": "demo"}'; echo
curl -sS -X POST "$SKILLFLEET_URL/api/tools/read_skill_resource" -H "$AGENT" -H "$JSON" -d '{"arguments": {"skill_name": "ticker", "path": "scripts/tick.py"}, "chat_id": "demo"}'; echo
curl -sS -X POST "$SKILLFLEET_URL/api/tools/read_skill_resource" -H "$AGENT" -H "$JSON" -d '{"arguments": {"skill_name": "ticker", "path": "../../skillfleet.db"}, "chat_id": "demo"}'; echo

step "Run a read-only script and wait for its result"
curl -sS -X POST "$SKILLFLEET_URL/api/tools/run_skill_script?wait=30" -H "$AGENT" -H "$JSON" -d '{"arguments": {"skill_name": "disk-report", "script": "scripts/report.py", "arguments": {"path": "/"}, "node": "local"}, "chat_id": "demo"}'; echo

step "Watch a run's output arrive live"
skillfleet run ticker scripts/tick.py --node local --args '{"count": 5}'

step "Start a long run, cancel it half-way, and look at it"
RUN=$(curl -sS -X POST "$SKILLFLEET_URL/api/tools/run_skill_script" -H "$AGENT" -H "$JSON" -d '{"arguments": {"skill_name": "ticker", "script": "scripts/tick.py", "arguments": {"count": 60}, "node": "local"}, "chat_id": "demo"}' | field run_id)
until skillfleet runs logs "$RUN" | grep -q "tick 3 of 60"; do sleep 1; done
skillfleet runs list --status running
skillfleet runs cancel "$RUN"
skillfleet runs logs -f "$RUN" || echo "(exit code $?)"
skillfleet runs list --status cancelled --limit 1

step "A destructive skill waits for the owner's approval; approved, the waiting call runs"
SCRATCH=$(mktemp -d) && chmod 0777 "$SCRATCH" && touch -d '10 days ago' "$SCRATCH/old.log" && touch "$SCRATCH/new.log"
trap 'rm -rf "$SCRATCH"' EXIT
CHAT="ops-$(date +%s)"
PURGE='{"arguments": {"skill_name": "purge-tmp", "script": "scripts/purge.py", "arguments": {"folder": "'"$SCRATCH"'", "days": 7}, "node": "local"}, "chat_id": "'"$CHAT"'"}'
WAITING=$(curl -sS -X POST "$SKILLFLEET_URL/api/tools/run_skill_script" -H "$AGENT" -H "$JSON" -d "$PURGE")
echo "$WAITING"
skillfleet approvals list
curl -sS -X POST "$SKILLFLEET_URL/api/approvals/$(echo "$WAITING" | field approval_id)" -H "$AGENT" -H "$JSON" -d '{"decision": "approve"}'; echo
skillfleet approvals approve "$(echo "$WAITING" | field approval_id)"
curl -sS "$SKILLFLEET_URL/api/calls/$(echo "$WAITING" | field call_id)?wait=30" -H "$AGENT"; echo
ls "$SCRATCH"

step "A destructive call asks every time in a chat; in plan mode the policy refuses it"
AGAIN=$(curl -sS -X POST "$SKILLFLEET_URL/api/tools/run_skill_script" -H "$AGENT" -H "$JSON" -d "$PURGE")
echo "$AGAIN"
PLAN='{"arguments": {"skill_name": "purge-tmp", "script": "scripts/purge.py", "arguments": {"folder": "'"$SCRATCH"'", "days": 7}, "node": "local"}, "chat_id": "'"$CHAT"'", "mode": "plan"}'
curl -sS -X POST "$SKILLFLEET_URL/api/tools/run_skill_script" -H "$AGENT" -H "$JSON" -d "$PLAN"; echo

step "Decline the call that still waits, so no card is left in the inbox"
skillfleet approvals deny "$(echo "$AGAIN" | field approval_id)"
skillfleet approvals list
