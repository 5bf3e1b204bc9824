//! What a task tells the status page and the exported metrics about itself:
//! a snapshot the task supervisor takes of its own core's state when it
//! changes (a commit, a watermark step), and why the task is not making
//! progress, if it is not. Nothing here is counted a second time: the
//! snapshot reads the lifecycle, the cycles, flow control, the held
//! elements and the timers where they live.
use crate::codec::timestamp::Watermark;
use crate::task::lifecycle::TaskState;

/// Where a task is in one of its input partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputPosition {
    pub topic: String,
    pub partition: i32,
    /// The offset after the last record the task received.
    pub position: i64,
    /// The next offset its last commit covers.
    pub committed: Option<i64>,
}

/// What may hold a task's output watermark below its input watermark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Panes a GroupByKey has not fired yet.
    GroupByKey,
    /// Main-input elements waiting for side inputs.
    SideInput,
    /// Pending timers of stateful DoFns.
    Timer,
    /// Work a split bundle or a splittable DoFn handed back.
    Deferred,
}

impl Hold {
    fn what(self) -> &'static str {
        match self {
            Hold::GroupByKey => "GroupByKey panes not fired yet",
            Hold::SideInput => "elements waiting for side inputs",
            Hold::Timer => "pending timers",
            Hold::Deferred => "deferred work (split bundles, splittable DoFn residuals)",
        }
    }
}

#[derive(Clone, Debug)]
pub struct TaskStatus {
    pub state: TaskState,
    pub inputs: Vec<InputPosition>,
    pub input_watermark: Watermark,
    /// The output watermark last reported downstream.
    pub output_watermark: Watermark,
    /// The holds on the output watermark, each at its earliest timestamp.
    pub holds: Vec<(Hold, Watermark)>,
    /// The watermark of each side input topic the stage reads.
    pub side_watermarks: Vec<(String, Watermark)>,
    /// Wall-clock time of the last commit (ms since the epoch).
    pub last_commit_ms: Option<i64>,
    pub commit_p50_ms: u64,
    pub commit_max_ms: u64,
    pub bundles: u64,
    pub bundle_p50_ms: u64,
    pub bundle_max_ms: u64,
    pub held_elements: usize,
    pub pending_timers: usize,
    pub deferred: usize,
    /// Records taken from Kafka waiting for room in the stage.
    pub queued_records: u64,
    /// Elements handed to the stage whose bundle has not finished.
    pub in_flight: u64,
    /// Its partitions are paused by flow control.
    pub flow_paused: bool,
    /// Input waits while a cycle decides which timers fire.
    pub gated: bool,
    /// The open commit cycle has waited this long (ms), if one is open.
    pub cycle_open_ms: Option<i64>,
    /// Estimated bytes of its local state store.
    pub state_bytes: Option<u64>,
}

impl TaskStatus {
    pub fn new(state: TaskState) -> TaskStatus {
        TaskStatus {
            state,
            inputs: Vec::new(),
            input_watermark: Watermark::NegInf,
            output_watermark: Watermark::NegInf,
            holds: Vec::new(),
            side_watermarks: Vec::new(),
            state_bytes: None,
            last_commit_ms: None,
            commit_p50_ms: 0,
            commit_max_ms: 0,
            bundles: 0,
            bundle_p50_ms: 0,
            bundle_max_ms: 0,
            held_elements: 0,
            pending_timers: 0,
            deferred: 0,
            queued_records: 0,
            in_flight: 0,
            flow_paused: false,
            gated: false,
            cycle_open_ms: None,
        }
    }

    /// Why the task is not progressing, each reason a sentence for an
    /// operator; empty while it is (or has nothing to do).
    pub fn waiting(&self) -> Vec<String> {
        let mut why = Vec::new();
        match self.state {
            TaskState::Created | TaskState::Restoring => why.push("restoring its state from the changelog".to_string()),
            TaskState::Finished | TaskState::Closed => return why,
            TaskState::Suspended => {
                why.push("stopped: its partitions moved or its transaction aborted; it restarts from its last commit".into())
            }
            TaskState::Running => {}
        }
        if self.flow_paused {
            why.push(format!(
                "input paused by flow control: {} record(s) queued, {} element(s) in the stage",
                self.queued_records, self.in_flight
            ));
        }
        if self.gated {
            why.push("input waits while a commit cycle fires timers".into());
        }
        if self.held_elements > 0 {
            let behind: Vec<String> = self
                .side_watermarks
                .iter()
                .filter(|(_, w)| *w != Watermark::PosInf)
                .map(|(t, w)| format!("'{t}' at {}", watermark_text(*w)))
                .collect();
            let sides = if behind.is_empty() { String::new() } else { format!(" (side input watermark {})", behind.join(", ")) };
            why.push(format!("{} element(s) wait for side inputs{sides}", self.held_elements));
        }
        for (hold, at) in &self.holds {
            if *at < self.input_watermark && *hold != Hold::SideInput {
                why.push(format!("output watermark held at {} by {}", watermark_text(*at), hold.what()));
            }
        }
        if self.input_watermark == Watermark::NegInf && self.state == TaskState::Running {
            why.push("no input watermark yet: waiting for every upstream task or source partition to report one".into());
        }
        if let Some(ms) = self.cycle_open_ms.filter(|ms| *ms >= SLOW_CYCLE_MS) {
            why.push(format!("its commit cycle has been open for {:.1} s", ms as f64 / 1000.0));
        }
        why
    }
}

/// How fast a task reads, to tell how long its lag would take to catch up:
/// the records read between two observations at least a few seconds apart.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReadRate {
    last: Option<(u64, i64)>,
    per_s: Option<f64>,
}

/// Observations closer than this are not worth a rate.
const RATE_WINDOW_MS: i64 = 2_000;

impl ReadRate {
    pub fn observe(&mut self, total_read: u64, now_ms: i64) {
        match self.last {
            None => self.last = Some((total_read, now_ms)),
            Some((read, at)) if now_ms - at >= RATE_WINDOW_MS => {
                self.per_s = Some(total_read.saturating_sub(read) as f64 * 1000.0 / (now_ms - at) as f64);
                self.last = Some((total_read, now_ms));
            }
            Some(_) => {}
        }
    }

    /// Seconds to read `lag` records at the current rate; `None` while no
    /// rate is known, or when the task reads nothing while behind (stuck:
    /// the status page says why instead).
    pub fn catch_up_s(&self, lag: i64) -> Option<f64> {
        if lag <= 0 {
            return Some(0.0);
        }
        self.per_s.filter(|r| *r > 0.0).map(|r| lag as f64 / r)
    }
}

/// A commit cycle open this long is worth telling an operator about.
const SLOW_CYCLE_MS: i64 = 10_000;

/// A watermark as an operator reads it: UTC ISO-8601 to the millisecond,
/// or "-inf" / "+inf".
pub fn watermark_text(w: Watermark) -> String {
    match w {
        Watermark::NegInf => "-inf".into(),
        Watermark::PosInf => "+inf".into(),
        Watermark::At(ms) => iso_millis(ms),
    }
}

/// `ms` since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ` (proleptic Gregorian).
pub fn iso_millis(ms: i64) -> String {
    let (days, in_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = civil_from_days(days);
    let (h, min, s, milli) = (in_day / 3_600_000, in_day / 60_000 % 60, in_day / 1000 % 60, in_day % 1000);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{milli:03}Z")
}

/// Days since 1970-01-01 to (year, month, day), after Howard Hinnant's
/// `civil_from_days`.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_dates() {
        assert_eq!(iso_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_millis(951_782_400_000 + 1), "2000-02-29T00:00:00.001Z");
        assert_eq!(iso_millis(1_796_255_999_999), "2026-12-02T23:59:59.999Z");
        assert_eq!(iso_millis(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(watermark_text(Watermark::NegInf), "-inf");
    }

    #[test]
    fn a_running_task_with_nothing_held_is_not_waiting() {
        let mut s = TaskStatus::new(TaskState::Running);
        s.input_watermark = Watermark::At(1000);
        s.output_watermark = Watermark::At(1000);
        s.holds = vec![(Hold::Timer, Watermark::PosInf), (Hold::GroupByKey, Watermark::At(1000))];
        assert!(s.waiting().is_empty(), "{:?}", s.waiting());
    }

    #[test]
    fn each_reason_is_told() {
        let mut s = TaskStatus::new(TaskState::Running);
        s.input_watermark = Watermark::At(10_000);
        s.holds = vec![(Hold::Timer, Watermark::At(5_000)), (Hold::SideInput, Watermark::At(1_000))];
        s.held_elements = 3;
        s.side_watermarks = vec![("side-topic".into(), Watermark::NegInf), ("done".into(), Watermark::PosInf)];
        s.flow_paused = true;
        s.queued_records = 7;
        s.cycle_open_ms = Some(12_000);
        let why = s.waiting();
        assert_eq!(why.len(), 4, "{why:?}");
        assert!(why[0].contains("flow control") && why[0].contains("7 record(s)"));
        assert!(why[1].contains("3 element(s)") && why[1].contains("'side-topic' at -inf") && !why[1].contains("done"));
        assert!(why[2].contains("1970-01-01T00:00:05.000Z") && why[2].contains("pending timers"));
        assert!(why[3].contains("12.0 s"));
    }

    #[test]
    fn catch_up_time_from_the_read_rate() {
        let mut r = ReadRate::default();
        assert_eq!(r.catch_up_s(10), None, "no rate yet");
        assert_eq!(r.catch_up_s(0), Some(0.0));
        r.observe(0, 0);
        r.observe(500, 1_000);
        assert_eq!(r.catch_up_s(10), None, "too close to tell");
        r.observe(2_000, 2_000);
        assert_eq!(r.catch_up_s(3_000), Some(3.0), "1000 records/s");
        r.observe(2_000, 5_000);
        assert_eq!(r.catch_up_s(1), None, "reads nothing while behind");
    }

    #[test]
    fn restoring_and_no_watermark() {
        assert!(TaskStatus::new(TaskState::Restoring).waiting()[0].contains("restoring"));
        let why = TaskStatus::new(TaskState::Running).waiting();
        assert!(why[0].contains("no input watermark"), "{why:?}");
        assert!(TaskStatus::new(TaskState::Finished).waiting().is_empty());
    }
}
