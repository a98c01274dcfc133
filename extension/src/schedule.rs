//! Schedules: when a task fires, judged by the database.
//!
//! A schedule is a cron pattern (5 fields, or 6 with seconds first, or a macro such as
//! `@hourly`) evaluated in an IANA time zone, or a fixed interval (`every 30 seconds`) counted
//! from the Unix epoch. Cron parsing and evaluation, daylight-saving rules included, are the
//! `croner` crate's; time zones come from `jiff`, which reads the system's zoneinfo, the same
//! files Debian's PostgreSQL uses. docs/schedules.md pins the semantics.
//!
//! Rust evaluates (`fire_times`, and the helpers `schedule.sql` calls); `schedule.sql` holds the
//! tasks table and turns due fire times into firings (catch-up, overlap, retries).
use croner::parser::{CronParser, Seconds};
use croner::Cron;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};
use pgrx::prelude::*;

use crate::errors::{invalid_argument, null_argument, raise};

extension_sql_file!(
    "schedule.sql",
    name = "schedule",
    requires = ["checks", "firing", fire_times, plan_firings_bounded, next_fire_time, check_schedule]
);

/// The most fire times one `fire_times` call returns (54000 beyond): a range that would
/// produce more is almost certainly a mistake, and would take a backend's memory.
pub(crate) const MAX_FIRE_TIMES: usize = 100_000;

/// The most firings one task gets in one catch-up pass (`catch_up => 'all'`); the rest follow
/// on the next pass.
pub(crate) const MAX_CATCH_UP: usize = 1_000;
/// The longest time zone name accepted, in bytes.
const MAX_ZONE_BYTES: usize = 64;

/// The longest schedule text accepted, in bytes.
const MAX_SCHEDULE_BYTES: usize = 1024;

/// The longest fixed interval: a year.
const MAX_EVERY_SECONDS: i64 = 366 * 24 * 3600;

/// Microseconds between the Unix epoch and PostgreSQL's (2000-01-01 UTC).
const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;

/// How many iterations a loop runs between two interrupt checks.
const INTERRUPT_EVERY: usize = 1024;

/// A parsed schedule.
enum Schedule {
    Cron(Box<Cron>),
    /// Every `n` seconds, at the instants that are multiples of `n` since the Unix epoch.
    Every(i64),
}

fn parse_schedule(text: &str) -> Result<Schedule, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("schedule must not be empty".into());
    }
    if text.len() > MAX_SCHEDULE_BYTES {
        return Err(format!("schedule is {} bytes long; the limit is {MAX_SCHEDULE_BYTES}", text.len()));
    }
    let lower = text.to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix("every ") {
        return parse_every(rest.trim()).map(Schedule::Every);
    }
    if !text.starts_with('@') {
        let fields = text.split_whitespace().count();
        if fields != 5 && fields != 6 {
            return Err(format!(
                "schedule \"{text}\" has {fields} fields: a cron schedule has 5 (minute hour day-of-month month day-of-week) or 6 (seconds first)"
            ));
        }
    }
    CronParser::builder()
        .seconds(Seconds::Optional)
        .build()
        .parse(text)
        .map(|c| Schedule::Cron(Box::new(c)))
        .map_err(|e| format!("schedule \"{text}\" is not valid: {e}"))
}

/// `30 seconds`, `5 minutes`, `1 hour`, `2 days` (singular or plural, or s/min/h/d).
fn parse_every(rest: &str) -> Result<i64, String> {
    let bad = || {
        format!(
            "schedule \"every {rest}\" is not valid: write every <n> seconds|minutes|hours|days, for example every 30 seconds"
        )
    };
    let mut parts = rest.split_whitespace();
    let (Some(n), Some(unit), None) = (parts.next(), parts.next(), parts.next()) else { return Err(bad()) };
    let n: i64 = n.parse().map_err(|_| bad())?;
    let unit_seconds = match unit {
        "second" | "seconds" | "sec" | "secs" | "s" => 1,
        "minute" | "minutes" | "min" | "mins" | "m" => 60,
        "hour" | "hours" | "h" => 3600,
        "day" | "days" | "d" => 86_400,
        _ => return Err(bad()),
    };
    match n.checked_mul(unit_seconds) {
        Some(s) if (1..=MAX_EVERY_SECONDS).contains(&s) => Ok(s),
        _ => Err(format!("schedule \"every {rest}\": the interval must be between 1 second and 366 days")),
    }
}

fn parse_zone(name: &str) -> Result<TimeZone, String> {
    if name.is_empty() {
        return Err("time_zone must not be empty".into());
    }
    // IANA names are under 40 bytes; a huge one must not come back in an error and a log line.
    if name.len() > MAX_ZONE_BYTES {
        return Err(format!("time_zone is {} bytes long; the limit is {MAX_ZONE_BYTES}", name.len()));
    }
    TimeZone::get(name)
        .map_err(|_| format!("unknown time zone \"{name}\" (use an IANA name such as Europe/Berlin)"))
}

/// A parsed schedule and its zone, or 22023.
fn require(schedule: Option<&str>, time_zone: Option<&str>) -> std::rc::Rc<(Schedule, TimeZone)> {
    let schedule = schedule.unwrap_or_else(|| null_argument("schedule"));
    let time_zone = time_zone.unwrap_or_else(|| null_argument("time_zone"));
    let key = (schedule.to_owned(), time_zone.to_owned());
    if let Some(parsed) = PARSED.with(|p| p.borrow().get(&key).cloned()) {
        return parsed;
    }
    let s = parse_schedule(schedule).unwrap_or_else(|e| invalid_argument(e));
    let z = parse_zone(time_zone).unwrap_or_else(|e| invalid_argument(e));
    let parsed = std::rc::Rc::new((s, z));
    PARSED.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() >= MAX_PARSED {
            p.clear();
        }
        p.insert(key, parsed.clone());
    });
    parsed
}

/// Schedules and zones this backend parsed, by their text: making a second's firings plans
/// every due task, and most tasks share a few schedules (parsing was half the cost).
/// Only what parsed is kept: an error is raised again each time.
type Parsed = std::collections::HashMap<(String, String), std::rc::Rc<(Schedule, TimeZone)>>;

thread_local! {
    static PARSED: std::cell::RefCell<Parsed> = std::cell::RefCell::new(Parsed::new());
}

/// The most parsed schedules a backend keeps (all are dropped when it is full).
const MAX_PARSED: usize = 1024;

fn to_jiff(t: TimestampWithTimeZone, name: &str) -> Timestamp {
    let pg: i64 = t.into();
    if pg == i64::MAX || pg == i64::MIN {
        invalid_argument(format!("{name} must be finite"));
    }
    pg.checked_add(PG_EPOCH_OFFSET_US)
        .and_then(|us| Timestamp::from_microsecond(us).ok())
        .unwrap_or_else(|| invalid_argument(format!("{name} is out of the range schedules cover")))
}

fn to_pg(t: Timestamp) -> TimestampWithTimeZone {
    let pg = t.as_microsecond() - PG_EPOCH_OFFSET_US;
    TimestampWithTimeZone::try_from(pg).unwrap_or_else(|_| {
        raise(PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW, format!("fire time {t} is out of range"))
    })
}

impl Schedule {
    /// The first fire time strictly after `after`; None when there is none (cron searches up
    /// to the year 5000).
    fn next_after(&self, zone: &TimeZone, after: Timestamp) -> Option<Timestamp> {
        match self {
            Schedule::Cron(c) => c
                .find_next_occurrence(&after.to_zoned(zone.clone()), false)
                .ok()
                .map(|z: Zoned| z.timestamp()),
            Schedule::Every(n) => {
                let s = after.as_second().div_euclid(*n) * n + n;
                Timestamp::from_second(s).ok()
            }
        }
    }

    /// The last fire time at or before `at`.
    fn latest_at_or_before(&self, zone: &TimeZone, at: Timestamp) -> Option<Timestamp> {
        match self {
            Schedule::Cron(c) => c
                .find_previous_occurrence(&at.to_zoned(zone.clone()), true)
                .ok()
                .map(|z: Zoned| z.timestamp()),
            Schedule::Every(n) => {
                // The last multiple of n seconds at or before `at` (sub-second part ignored).
                let s = at.as_second().div_euclid(*n) * n;
                Timestamp::from_second(s).ok()
            }
        }
    }

    /// Fire times in (after, until], at most `max` of them; `Err(())` when there are more.
    fn between(
        &self,
        zone: &TimeZone,
        after: Timestamp,
        until: Timestamp,
        max: usize,
    ) -> Result<Vec<Timestamp>, ()> {
        self.between_and_next(zone, after, until, max).map(|(times, _)| times)
    }

    /// The first `max` fire times in (after, until], and whether more follow within it: never
    /// more than `max` in memory, however long the span (a year of a per-second task is 31 M).
    fn first_between(
        &self,
        zone: &TimeZone,
        after: Timestamp,
        until: Timestamp,
        max: usize,
    ) -> (Vec<Timestamp>, bool) {
        let mut out = Vec::new();
        let mut cursor = after;
        while let Some(next) = self.next_after(zone, cursor) {
            if next > until {
                return (out, false);
            }
            if out.len() == max {
                return (out, true);
            }
            out.push(next);
            cursor = next;
        }
        (out, false)
    }

    /// [`between`](Self::between), and the first fire time after `until` (found on the way).
    #[allow(clippy::type_complexity)]
    fn between_and_next(
        &self,
        zone: &TimeZone,
        after: Timestamp,
        until: Timestamp,
        max: usize,
    ) -> Result<(Vec<Timestamp>, Option<Timestamp>), ()> {
        let mut out = Vec::new();
        let mut cursor = after;
        while let Some(next) = self.next_after(zone, cursor) {
            if next > until {
                return Ok((out, Some(next)));
            }
            if out.len() == max {
                return Err(());
            }
            if out.len() % INTERRUPT_EVERY == 0 {
                pg_sys::check_for_interrupts!();
            }
            out.push(next);
            cursor = next;
        }
        Ok((out, None))
    }
}

/// The fire times of `schedule` in `time_zone` strictly after `after` and up to `until`
/// (inclusive), in order. Pure: nothing is stored.
#[pg_extern(immutable, parallel_safe)]
fn fire_times(
    schedule: Option<&str>,
    time_zone: Option<&str>,
    after: Option<TimestampWithTimeZone>,
    until: Option<TimestampWithTimeZone>,
) -> SetOfIterator<'static, TimestampWithTimeZone> {
    let parsed = require(schedule, time_zone);
    let (s, zone) = (&parsed.0, &parsed.1);
    let after = to_jiff(after.unwrap_or_else(|| null_argument("after")), "after");
    let until = to_jiff(until.unwrap_or_else(|| null_argument("until")), "until");
    crate::errors::ensure_memory(2 * MAX_FIRE_TIMES * std::mem::size_of::<Timestamp>(), "fire_times");
    let times = s.between(zone, after, until, MAX_FIRE_TIMES).unwrap_or_else(|()| {
        raise(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!(
                "more than {MAX_FIRE_TIMES} fire times between {after} and {until}; ask for a shorter range"
            ),
        )
    });
    SetOfIterator::new(times.into_iter().map(to_pg))
}

/// Validates a schedule and a time zone (22004 / 22023); returns the next fire time after
/// `after`, and refuses a schedule that never fires again.
#[pg_extern(immutable, parallel_safe, name = "_check_schedule")]
fn check_schedule(
    schedule: Option<&str>,
    time_zone: Option<&str>,
    after: Option<TimestampWithTimeZone>,
) -> TimestampWithTimeZone {
    let parsed = require(schedule, time_zone);
    let (s, zone) = (&parsed.0, &parsed.1);
    let after = to_jiff(after.unwrap_or_else(|| null_argument("after")), "after");
    match s.next_after(zone, after) {
        Some(next) => to_pg(next),
        None => invalid_argument(format!(
            "schedule \"{}\" never fires again (no fire time before the year 5000)",
            schedule.unwrap_or_default().trim()
        )),
    }
}

/// The first fire time strictly after `after` (NULL: none before the year 5000). For
/// schedules stored by `schedule_task`, which were checked then.
#[pg_extern(immutable, parallel_safe, name = "_next_fire_time")]
fn next_fire_time(
    schedule: Option<&str>,
    time_zone: Option<&str>,
    after: Option<TimestampWithTimeZone>,
) -> Option<TimestampWithTimeZone> {
    let parsed = require(schedule, time_zone);
    let (s, zone) = (&parsed.0, &parsed.1);
    s.next_after(zone, to_jiff(after.unwrap_or_else(|| null_argument("after")), "after")).map(to_pg)
}

/// One task's catch-up decision: of the fire times in [`from`, `now`] (`from` is the task's
/// stored next fire time), which become firings now, how many are skipped, and the task's
/// next fire time after this pass. Policies (docs/schedules.md):
/// - `latest`: only the last due fire time runs; the earlier ones are skipped;
/// - `all`: every due fire time within `window` of `now` runs (at most `max_run` a pass, the
///   rest on the next); older ones are skipped;
/// - `skip`: the last due fire time runs only if it is within `window` of `now`.
///
/// `skipped` counts at most `MAX_FIRE_TIMES` a pass.
#[pg_extern(immutable, parallel_safe, name = "_plan_firings")]
fn plan_firings_bounded(
    schedule: &str,
    time_zone: &str,
    catch_up: &str,
    window: Interval,
    from: TimestampWithTimeZone,
    now: TimestampWithTimeZone,
    max_run: i32,
) -> TableIterator<
    'static,
    (
        name!(run_at, Vec<TimestampWithTimeZone>),
        name!(skipped, i64),
        name!(next_fire_at, Option<TimestampWithTimeZone>),
    ),
> {
    plan(schedule, time_zone, catch_up, window, from, now, max_run)
}

/// `_plan_firings`'s result: the fire times to run now, how many were skipped, the next one.
/// (Spelled out in each `#[pg_extern]`: pgrx reads a set-returning function's columns from
/// its signature.)
type PlannedFirings = TableIterator<
    'static,
    (
        name!(run_at, Vec<TimestampWithTimeZone>),
        name!(skipped, i64),
        name!(next_fire_at, Option<TimestampWithTimeZone>),
    ),
>;

pub(crate) fn plan(
    schedule: &str,
    time_zone: &str,
    catch_up: &str,
    window: Interval,
    from: TimestampWithTimeZone,
    now: TimestampWithTimeZone,
    max_run: i32,
) -> PlannedFirings {
    let parsed = require(Some(schedule), Some(time_zone));
    let (s, zone) = (&parsed.0, &parsed.1);
    let window_start = to_jiff(now - window, "now - catch_up_window");
    let (from, now) = (to_jiff(from, "from"), to_jiff(now, "now"));
    // Fire times in [from, now]: `between` is (after, until], so start one microsecond early.
    let just_before_from = from.checked_sub(jiff::SignedDuration::from_micros(1)).unwrap_or(from);
    let count = |after: Timestamp, until: Timestamp| -> i64 {
        match s.between(zone, after, until, MAX_FIRE_TIMES) {
            Ok(v) => v.len() as i64,
            Err(()) => MAX_FIRE_TIMES as i64,
        }
    };
    let (run, skipped, resume_after) = match catch_up {
        "all" => {
            let first = if window_start > just_before_from { window_start } else { just_before_from };
            let max_run = usize::try_from(max_run).unwrap_or(0).clamp(1, MAX_CATCH_UP);
            let (run, more) = s.first_between(zone, first, now, max_run);
            let skipped = if first > just_before_from { count(just_before_from, first) } else { 0 };
            let resume = if more { *run.last().expect("a full batch") } else { now };
            (run, skipped, resume)
        }
        "latest" | "skip" => {
            // Usually one or two fire times: walk them (and learn the next one on the way);
            // after a long downtime, count up to the cap and search back for the latest.
            let (due, latest, next) = match s.between_and_next(zone, just_before_from, now, MAX_FIRE_TIMES) {
                Ok((times, next)) => (times.len() as i64, times.last().copied(), Some(next)),
                Err(()) => {
                    (MAX_FIRE_TIMES as i64, s.latest_at_or_before(zone, now).filter(|t| *t >= from), None)
                }
            };
            let run: Vec<Timestamp> = match latest {
                Some(t) if catch_up == "latest" || t >= window_start => vec![t],
                _ => vec![],
            };
            let skipped = (due - run.len() as i64).max(0);
            let next = next.unwrap_or_else(|| s.next_after(zone, now));
            return TableIterator::once((run.into_iter().map(to_pg).collect(), skipped, next.map(to_pg)));
        }
        other => invalid_argument(format!("catch_up must be latest, all or skip (got \"{other}\")")),
    };
    let next = s.next_after(zone, resume_after).map(to_pg);
    TableIterator::once((run.into_iter().map(to_pg).collect(), skipped, next))
}

/// `every <n> seconds` for an interval, so a schedule can be written from an `interval`:
/// `rendezvous.every('90 seconds')` is `every 90 seconds`.
#[pg_extern(immutable, parallel_safe)]
fn every(interval: Option<Interval>) -> String {
    let interval = interval.unwrap_or_else(|| null_argument("interval"));
    if interval.months() != 0 {
        invalid_argument(format!(
            "interval must not contain months or years (got {interval}): months vary in length"
        ));
    }
    // In i128: days times microseconds a day overflows i64 (it wrapped to "every 60 seconds"
    // in a release build, #39), and the portable edition computes it in numeric.
    let micros = i128::from(interval.days()) * 86_400_000_000 + i128::from(interval.micros());
    if micros % 1_000_000 != 0 {
        invalid_argument(format!("interval must be a whole number of seconds (got {interval})"));
    }
    let seconds = micros / 1_000_000;
    if !(1..=i128::from(MAX_EVERY_SECONDS)).contains(&seconds) {
        invalid_argument(format!("interval must be between 1 second and 366 days (got {interval})"));
    }
    format!("every {seconds} seconds")
}
