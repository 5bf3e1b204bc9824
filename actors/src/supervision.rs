//! Panics inside a job's actors. Every actor of a job runs on the job's
//! thread, inside tasks of its runtime: a panic there ends only that task
//! (the runtime catches it), so the actor would be gone while the job stayed
//! RUNNING forever. A process-wide panic hook reports panics on a watched
//! thread to that thread's job, which then fails with the panic's message.
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, Once};
use std::thread::ThreadId;

use tokio::sync::mpsc;

static WATCHED: LazyLock<Mutex<HashMap<ThreadId, mpsc::UnboundedSender<String>>>> = LazyLock::new(|| Mutex::new(HashMap::new()));
static HOOK: Once = Once::new();

/// Stops reporting this thread's panics when dropped.
pub struct Watch {
    thread: ThreadId,
}

impl Drop for Watch {
    fn drop(&mut self) {
        WATCHED.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.thread);
    }
}

/// Reports every later panic on the calling thread to the receiver, as
/// "<message> at <file:line>".
pub fn watch_this_thread() -> (Watch, mpsc::UnboundedReceiver<String>) {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let watched = WATCHED.lock().unwrap_or_else(|e| e.into_inner()).get(&std::thread::current().id()).cloned();
            if let Some(tx) = watched {
                let message = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".into());
                let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
                let _ = tx.send(format!("{message}{at}"));
            }
            previous(info);
        }));
    });
    let (tx, rx) = mpsc::unbounded_channel();
    let thread = std::thread::current().id();
    WATCHED.lock().unwrap_or_else(|e| e.into_inner()).insert(thread, tx);
    (Watch { thread }, rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix::prelude::*;

    struct Fragile;
    impl Actor for Fragile {
        type Context = Context<Self>;
    }

    #[derive(Message)]
    #[rtype(result = "()")]
    struct Break;

    impl Handler<Break> for Fragile {
        type Result = ();
        fn handle(&mut self, _: Break, _: &mut Context<Self>) {
            panic!("the actor broke");
        }
    }

    #[test]
    fn a_panicking_actor_is_reported_to_its_job() {
        std::thread::spawn(|| {
            let (_watch, mut panics) = watch_this_thread();
            let system = actix::System::new();
            let report = system.block_on(async move {
                Fragile.start().do_send(Break);
                tokio::time::timeout(std::time::Duration::from_secs(10), panics.recv()).await
            });
            let report = report.expect("reported in time").expect("a report");
            assert!(report.contains("the actor broke") && report.contains("supervision.rs"), "{report}");
        })
        .join()
        .expect("the test thread itself did not panic");
    }
}
