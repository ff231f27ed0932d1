// The next times a five-field cron expression fires, in an IANA time zone (DST included).

const FIELDS = [
  ["minute", 0, 59],
  ["hour", 0, 23],
  ["day", 1, 31],
  ["month", 1, 12],
  ["weekday", 0, 7],
];
const NAMES = { jan: 1, feb: 2, mar: 3, apr: 4, may: 5, jun: 6, jul: 7, aug: 8, sep: 9, oct: 10, nov: 11, dec: 12,
  sun: 0, mon: 1, tue: 2, wed: 3, thu: 4, fri: 5, sat: 6 };

function value(text, name) {
  const number = /^\d+$/.test(text) ? Number(text) : NAMES[text.toLowerCase()];
  if (number === undefined) throw new Error(`'${text}' is not a valid ${name}.`);
  return number;
}

function field(text, [name, low, high]) {
  const allowed = new Set();
  for (const part of text.split(",")) {
    const [range, stepText] = part.split("/");
    const step = stepText === undefined ? 1 : value(stepText, name);
    if (step < 1) throw new Error(`The step in '${part}' must be at least 1.`);
    let [from, to] = [low, high];
    if (range !== "*") {
      const [a, b] = range.split("-");
      from = value(a, name);
      to = b === undefined ? (stepText === undefined ? from : high) : value(b, name);
    }
    if (from < low || to > high || from > to) throw new Error(`'${part}' is outside ${name} ${low}–${high}.`);
    for (let v = from; v <= to; v += step) allowed.add(name === "weekday" && v === 7 ? 0 : v);
  }
  return { allowed, any: text === "*" };
}

export function parse(expression) {
  const parts = expression.trim().split(/\s+/);
  if (parts.length !== 5) throw new Error("A cron expression has five fields: minute hour day month weekday.");
  return parts.map((part, index) => field(part, FIELDS[index]));
}

function wallClock(format, date) {
  const parts = Object.fromEntries(format.formatToParts(date).map((p) => [p.type, p.value]));
  const weekday = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"].indexOf(parts.weekday);
  const wall = { minute: Number(parts.minute), hour: Number(parts.hour) % 24, day: Number(parts.day), month: Number(parts.month), weekday };
  // The wall-clock time as if it were UTC: how far the clock on the wall moved, gaps included.
  wall.at = Date.UTC(Number(parts.year), wall.month - 1, wall.day, wall.hour, wall.minute);
  return wall;
}

function matches([minute, hour, day, month, weekday], wall) {
  // Vixie cron: when both day fields are restricted, either one matching is enough.
  const dayOk = day.any || weekday.any
    ? day.allowed.has(wall.day) && weekday.allowed.has(wall.weekday)
    : day.allowed.has(wall.day) || weekday.allowed.has(wall.weekday);
  return month.allowed.has(wall.month) && dayOk && hour.allowed.has(wall.hour) && minute.allowed.has(wall.minute);
}

// Did the clock skip (spring forward) a matching time between `before` and `wall`? Such a time
// runs at the first minute after the gap, as the server's croniter does. The loop below never
// jumps past a wall time that could match, so any match in between lies in the gap.
function skippedMatch(fields, before, wall) {
  for (let at = before.at + 60000; at < wall.at; at += 60000) {
    const d = new Date(at);
    const skipped = { minute: d.getUTCMinutes(), hour: d.getUTCHours(), day: d.getUTCDate(), month: d.getUTCMonth() + 1, weekday: d.getUTCDay() };
    if (matches(fields, skipped)) return true;
  }
  return false;
}

// Minutes to move on by, at most an hour short of the wall-clock target: a DST gap (an hour at
// most) crossed on the way then can't carry the clock past the target.
const towards = (minutes) => (minutes > 60 ? minutes - 60 : minutes) * 60000;

// The next `count` firing times after `from`, as Dates.
export function nextTimes(expression, timeZone, count = 5, from = new Date()) {
  const fields = parse(expression);
  const [, hour, day, month, weekday] = fields;
  const format = new Intl.DateTimeFormat("en-US", { timeZone, hourCycle: "h23", year: "numeric", month: "numeric",
    day: "numeric", hour: "numeric", minute: "numeric", weekday: "short" });
  const found = [];
  let t = Math.floor(from.getTime() / 60000) * 60000 + 60000;
  let before = null;
  let beforeT = t;
  for (let guard = 0; found.length < count && guard < 200000; guard += 1) {
    const wall = wallClock(format, new Date(t));
    const gap = before !== null && wall.at - before.at > t - beforeT;
    if (matches(fields, wall) || (gap && skippedMatch(fields, before, wall))) {
      found.push(new Date(t));
    }
    before = wall;
    beforeT = t;
    const dayOk = day.any || weekday.any
      ? day.allowed.has(wall.day) && weekday.allowed.has(wall.weekday)
      : day.allowed.has(wall.day) || weekday.allowed.has(wall.weekday);
    if (!month.allowed.has(wall.month) || !dayOk) {
      t += towards((23 - wall.hour) * 60 + (60 - wall.minute));
    } else if (!hour.allowed.has(wall.hour)) {
      t += towards(60 - wall.minute);
    } else {
      t += 60000;
    }
  }
  return found;
}
