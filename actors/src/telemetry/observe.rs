//! The exported metrics read where the state lives: each collection walks
//! the status boards of the jobs running in this process (`status_board`)
//! and observes every task's counters and latest status. Registered once,
//! after the meter provider was installed.
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use beam_kafka_runtime::codec::timestamp::Watermark;
use beam_kafka_runtime::task::lifecycle::TaskState;
use opentelemetry::metrics::{AsyncInstrument, Meter};
use opentelemetry::KeyValue;

use crate::status_board::{live_boards, now_ms, StatusBoard, TaskEntry};

type Observer<T> = Box<dyn Fn(&StatusBoard, &TaskEntry) -> Option<T> + Send + Sync>;

/// Registers the observed instruments (once; later calls do nothing).
pub fn register_observers() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let meter = opentelemetry::global::meter("beam-kafka");
        register(&meter);
    });
}

/// Observes `f` of every task of every live board; `messaging` adds the
/// messaging conventions' `messaging.system`.
fn per_task<T: Copy + 'static>(observe: &dyn AsyncInstrument<T>, f: &Observer<T>, messaging: bool) {
    for board in live_boards() {
        for (_, entry) in board.tasks() {
            let Some(v) = f(&board, &entry) else { continue };
            if messaging {
                let mut a = entry.meters.attributes.clone();
                a.push(KeyValue::new("messaging.system", "kafka"));
                observe.observe(v, &a);
            } else {
                observe.observe(v, &entry.meters.attributes);
            }
        }
    }
}

fn seconds(w: Watermark) -> Option<f64> {
    match w {
        Watermark::At(ms) => Some(ms as f64 / 1000.0),
        _ => None,
    }
}

fn register(meter: &Meter) {
    // Counters of the tasks; the first two are the messaging conventions'
    // (with `messaging.system`).
    let counters: [(&'static str, &'static str, &'static str, bool, Observer<u64>); 5] = [
        (
            "messaging.client.consumed.messages",
            "{message}",
            "Kafka records a task read from its input partitions",
            true,
            Box::new(|_, e| Some(e.meters.records_read.load(Ordering::Relaxed))),
        ),
        (
            "messaging.client.sent.messages",
            "{message}",
            "Kafka records a task's stage wrote (runner topics and WriteToKafka)",
            true,
            Box::new(|_, e| Some(e.meters.records_written.load(Ordering::Relaxed))),
        ),
        (
            "beam_kafka.task.commits",
            "{commit}",
            "Commit cycles a task completed (transaction or offset commits)",
            false,
            Box::new(|_, e| Some(e.meters.commits.load(Ordering::Relaxed))),
        ),
        (
            "beam_kafka.task.commit.failures",
            "{commit}",
            "Commit attempts that failed (retried, or ending the task's incarnation)",
            false,
            Box::new(|_, e| Some(e.meters.commit_failures.load(Ordering::Relaxed))),
        ),
        (
            "beam_kafka.task.changelog.written",
            "By",
            "Bytes of state changes a task wrote to its changelog",
            false,
            Box::new(|_, e| Some(e.meters.changelog_bytes.load(Ordering::Relaxed))),
        ),
    ];
    for (name, unit, what, is_messaging, f) in counters {
        meter
            .u64_observable_counter(name)
            .with_unit(unit)
            .with_description(what)
            .with_callback(move |o| per_task(o, &f, is_messaging))
            .build();
    }
    // Gauges of the tasks.
    let gauges: [(&'static str, &'static str, &'static str, Observer<f64>); 8] = [
        (
            "beam_kafka.task.consumer_lag",
            "{message}",
            "Records between a task's position and the end of its input partitions",
            Box::new(|b, e| b.task_lag(&e.status).map(|l| l as f64)),
        ),
        (
            "beam_kafka.task.consumer_lag.time",
            "s",
            "Seconds a task would take to read its lag at its current read rate",
            Box::new(|b, e| b.task_lag(&e.status).and_then(|l| e.read_rate.catch_up_s(l))),
        ),
        (
            "beam_kafka.task.input_watermark",
            "s",
            "A task's input watermark, seconds since the epoch",
            Box::new(|_, e| seconds(e.status.input_watermark)),
        ),
        (
            "beam_kafka.task.output_watermark",
            "s",
            "The output watermark a task last reported, seconds since the epoch",
            Box::new(|_, e| seconds(e.status.output_watermark)),
        ),
        (
            "beam_kafka.task.watermark_lag",
            "s",
            "How far a task's output watermark is behind the wall clock",
            Box::new(|_, e| seconds(e.status.output_watermark).map(|w| (now_ms() as f64 / 1000.0 - w).max(0.0))),
        ),
        (
            "beam_kafka.task.held_elements",
            "{element}",
            "Main-input elements waiting for side inputs",
            Box::new(|_, e| Some(e.status.held_elements as f64)),
        ),
        (
            "beam_kafka.task.pending_timers",
            "{timer}",
            "Timers set and not fired yet",
            Box::new(|_, e| Some(e.status.pending_timers as f64)),
        ),
        (
            "beam_kafka.task.state.size",
            "By",
            "Estimated bytes of a task's local state store",
            Box::new(|_, e| e.status.state_bytes.map(|b| b as f64)),
        ),
    ];
    for (name, unit, what, f) in gauges {
        meter.f64_observable_gauge(name).with_unit(unit).with_description(what).with_callback(move |o| per_task(o, &f, false)).build();
    }
    // Of each job in this process.
    meter
        .u64_observable_gauge("beam_kafka.tasks.running")
        .with_unit("{task}")
        .with_description("Tasks running in this copy")
        .with_callback(|o| {
            for b in live_boards() {
                let running = b.tasks().iter().filter(|(_, e)| e.status.state == TaskState::Running).count();
                o.observe(running as u64, &b.attributes);
            }
        })
        .build();
    meter
        .u64_observable_counter("beam_kafka.rebalances")
        .with_unit("{rebalance}")
        .with_description("Consumer group rebalances this copy took part in")
        .with_callback(|o| {
            for b in live_boards() {
                o.observe(b.rebalances.load(Ordering::Relaxed), &b.attributes);
            }
        })
        .build();
    meter
        .u64_observable_gauge("beam_kafka.job.state")
        .with_unit("{state}")
        .with_description("1 for the state the job is in (attribute beam_kafka.job.state: RUNNING, DONE, FAILED, ...)")
        .with_callback(|o| {
            for b in live_boards() {
                let mut a = b.attributes.clone();
                a.push(KeyValue::new("beam_kafka.job.state", b.state()));
                o.observe(1, &a);
            }
        })
        .build();
    meter
        .f64_observable_gauge("beam_kafka.job.uptime")
        .with_unit("s")
        .with_description("Seconds since the job started in this copy")
        .with_callback(|o| {
            for b in live_boards() {
                o.observe(b.uptime_s(), &b.attributes);
            }
        })
        .build();
}
