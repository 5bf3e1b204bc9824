//! The thread that serves a producer's delivery reports, woken by
//! librdkafka only when there is something to serve.
//!
//! rdkafka's `ThreadedProducer` polls every 100 ms, and its poll loop
//! spins through the last millisecond of each wait (the remaining time is
//! rounded down to whole milliseconds, so it asks librdkafka for 0 ms
//! until the deadline passes). With a producer per task that spin was 30%
//! of the runner's CPU on the stateful Kafka-to-Kafka benchmark (perf:
//! `clock_gettime` under `Deadline::elapsed`). Here librdkafka writes a
//! byte to a pipe whenever the producer's event queue goes from empty to
//! non-empty (`rd_kafka_queue_io_event_enable`); the thread blocks on the
//! pipe and then serves the queue without waiting until it is empty.
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::bindings as rdsys;
use rdkafka::producer::{BaseProducer, Producer, ProducerContext};

/// Serves at most this many events before looking at the stop flag again.
const EVENTS_PER_PASS: usize = 4096;

/// The running thread, stopped (and joined) on drop.
pub struct DeliveryPoller {
    stop: Arc<AtomicBool>,
    /// Written to wake the thread for its stop.
    wake: Option<std::io::PipeWriter>,
    thread: Option<JoinHandle<()>>,
}

/// The producer's main queue with I/O events on; disabled before release.
struct MainQueue(*mut rdsys::rd_kafka_queue_t);

// SAFETY: librdkafka's queue handles are thread-safe; the handle is used by
// the one polling thread and released once, on drop.
unsafe impl Send for MainQueue {}

impl MainQueue {
    fn len(&self) -> usize {
        // SAFETY: the handle is valid until drop.
        unsafe { rdsys::rd_kafka_queue_length(self.0) }
    }
}

impl Drop for MainQueue {
    fn drop(&mut self) {
        // SAFETY: the handle is valid; an fd of -1 turns the events off
        // before the pipe closes.
        unsafe {
            rdsys::rd_kafka_queue_io_event_enable(self.0, -1, std::ptr::null(), 0);
            rdsys::rd_kafka_queue_destroy(self.0);
        }
    }
}

fn set_nonblocking(fd: &impl AsRawFd) -> std::io::Result<()> {
    // SAFETY: plain fcntl calls on an open descriptor.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

impl DeliveryPoller {
    /// Starts serving `producer`'s events (delivery reports, errors, logs).
    pub fn start<C: ProducerContext + 'static>(producer: Arc<BaseProducer<C>>) -> std::io::Result<DeliveryPoller> {
        let (mut reader, events) = std::io::pipe()?;
        let wake = events.try_clone()?;
        // librdkafka must never block on a full pipe: its byte only wakes us.
        let events: OwnedFd = events.into();
        set_nonblocking(&events)?;
        // SAFETY: the client pointer is valid while `producer` lives (the
        // thread holds it); librdkafka copies the one-byte payload.
        let queue = unsafe {
            let q = rdsys::rd_kafka_queue_get_main(producer.client().native_ptr());
            rdsys::rd_kafka_queue_io_event_enable(q, events.as_raw_fd(), b"!".as_ptr().cast(), 1);
            MainQueue(q)
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new().name("producer events".into()).spawn(move || {
            // Owned here so the queue's events go off before the pipe closes.
            let (queue, _events) = (queue, events);
            let mut buf = [0u8; 64];
            while !stopping.load(Ordering::Acquire) {
                // Events queued before the first wake-up, or since the last
                // check (those wrote a byte too), are served first.
                if !serve(&producer, &queue) {
                    // librdkafka keeps something queued that a poll does
                    // not take: look again shortly rather than spin.
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                if queue.len() > 0 {
                    continue; // a long queue: see the stop flag between passes
                }
                match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            // Deliveries of a closing producer still queued.
            serve(&producer, &queue);
        })?;
        Ok(DeliveryPoller { stop, wake: Some(wake), thread: Some(thread) })
    }
}

/// Serves up to [`EVENTS_PER_PASS`] queued events without waiting; false
/// when polls stopped taking anything from a non-empty queue.
fn serve<C: ProducerContext + 'static>(producer: &BaseProducer<C>, queue: &MainQueue) -> bool {
    let mut idle = 0;
    for _ in 0..EVENTS_PER_PASS {
        let before = queue.len();
        if before == 0 {
            return true;
        }
        producer.poll(Duration::ZERO);
        if queue.len() >= before {
            idle += 1;
            if idle == 64 {
                return false;
            }
        } else {
            idle = 0;
        }
    }
    true
}

impl Drop for DeliveryPoller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(mut wake) = self.wake.take() {
            use std::io::Write;
            let _ = wake.write_all(b"x");
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
