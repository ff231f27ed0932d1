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
  return { minute: Number(parts.minute), hour: Number(parts.hour) % 24, day: Number(parts.day), month: Number(parts.month), weekday };
}

// The next `count` firing times after `from`, as Dates.
export function nextTimes(expression, timeZone, count = 5, from = new Date()) {
  const [minute, hour, day, month, weekday] = parse(expression);
  const format = new Intl.DateTimeFormat("en-US", { timeZone, hourCycle: "h23", year: "numeric", month: "numeric",
    day: "numeric", hour: "numeric", minute: "numeric", weekday: "short" });
  const found = [];
  let t = Math.floor(from.getTime() / 60000) * 60000 + 60000;
  for (let guard = 0; found.length < count && guard < 200000; guard += 1) {
    const wall = wallClock(format, new Date(t));
    // Vixie cron: when both day fields are restricted, either one matching is enough.
    const dayOk = day.any || weekday.any
      ? day.allowed.has(wall.day) && weekday.allowed.has(wall.weekday)
      : day.allowed.has(wall.day) || weekday.allowed.has(wall.weekday);
    if (!month.allowed.has(wall.month) || !dayOk) {
      t += ((23 - wall.hour) * 60 + (60 - wall.minute)) * 60000;
    } else if (!hour.allowed.has(wall.hour)) {
      t += (60 - wall.minute) * 60000;
    } else {
      if (minute.allowed.has(wall.minute)) found.push(new Date(t));
      t += 60000;
    }
  }
  return found;
}
