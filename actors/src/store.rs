//! A task's local state store: RocksDB under `state_dir/<application id>/<task>`,
//! a copy of what the task's changelog partition holds, so a restart on the
//! same machine restores from disk and reads only the changelog's tail.
//!
//! As in Kafka Streams under exactly-once, a checkpoint (the changelog offset
//! the store is current to) is written only on a clean close and removed when
//! the store is opened: a store without one may hold writes of a transaction
//! that never committed, so it is wiped and rebuilt from the changelog.
use std::path::{Path, PathBuf};

use beam_kafka_runtime::plan::topology::TaskId;
use beam_kafka_runtime::state::user_state::StoredCells;
use std::sync::OnceLock;

use rocksdb::{BlockBasedOptions, Cache, Options, WriteBatch, WriteBufferManager, WriteOptions, DB};

const CHECKPOINT: &str = "checkpoint";
/// The file a task store's directory is locked through, made by the runner:
/// clean-up deletes only directories that hold it.
pub const STORE_LOCK: &str = "beam-kafka.lock";

/// Stored entries: (key, value), in key order.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

pub struct TaskStore {
    db: DB,
    dir: PathBuf,
    /// Held (locked) for as long as the store is open.
    _lock: std::fs::File,
}

pub fn task_dir(state_dir: &Path, application_id: &str, task: TaskId) -> PathBuf {
    state_dir.join(application_id).join(task.to_string())
}

/// The memory every task store of this process shares. RocksDB's default
/// is a write buffer of 64 MB (two of them while one flushes) and a block
/// cache per store, so a copy's memory grew with its tasks and with every
/// write until a buffer filled: +230 MB over 1M counted records on 8 tasks.
struct SharedMemory {
    cache: Cache,
    buffers: WriteBufferManager,
}

static SHARED_MEMORY: OnceLock<SharedMemory> = OnceLock::new();

/// The shared block cache of `total_mb` and its write buffer manager:
/// the stores' write buffers (flushed once they pass half of it) are
/// charged to the cache, so both stay within the one bound. The first
/// store opened in the process sets it.
fn shared_memory(total_mb: u64) -> &'static SharedMemory {
    SHARED_MEMORY.get_or_init(|| {
        let total = (total_mb as usize) << 20;
        let cache = Cache::new_lru_cache(total);
        let buffers = WriteBufferManager::new_write_buffer_manager_with_cache(total / 2, false, cache.clone());
        SharedMemory { cache, buffers }
    })
}

/// A store's write buffer: small, as Kafka Streams' (16 MB), since the
/// shared manager flushes the largest when all of them are over their half.
const WRITE_BUFFER_BYTES: usize = 16 << 20;

/// Locks the store directory `dir`, waiting up to 5 s for an incarnation
/// that is closing (`wait`), or not at all; `None`: another holder has it.
fn lock_store(dir: &Path, wait: bool) -> Result<Option<std::fs::File>, String> {
    let path = dir.join(STORE_LOCK);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    for _ in 0..if wait { 50 } else { 1 } {
        match file.try_lock() {
            Ok(()) => return Ok(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) if wait => std::thread::sleep(std::time::Duration::from_millis(100)),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(format!("cannot lock {}: {e}", path.display())),
        }
    }
    Ok(None)
}

/// Deletes a task store's directory if the runner made it (it holds the
/// lock file) and no store has it open (the lock is free); returns whether
/// it did.
pub fn remove_store_dir(dir: &Path) -> std::io::Result<bool> {
    let lock = match std::fs::OpenOptions::new().write(true).open(dir.join(STORE_LOCK)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Ok(false),
        Err(std::fs::TryLockError::Error(e)) => return Err(e),
    }
    std::fs::remove_dir_all(dir)?;
    Ok(true)
}

impl TaskStore {
    /// Opens the store (sharing `memory_mb` with every store of this
    /// process); returns it and the changelog offset to restore from.
    pub fn open(dir: PathBuf, memory_mb: u64) -> Result<(TaskStore, i64), String> {
        Self::open_locking(dir.clone(), memory_mb, true)?.ok_or_else(|| {
            format!(
                "the state store {} is in use by another process: copies of one application on the same machine need \
                 different state directories",
                dir.display()
            )
        })
    }

    /// `open`, unless another holder has the store open (`None`).
    pub fn open_if_free(dir: PathBuf, memory_mb: u64) -> Result<Option<(TaskStore, i64)>, String> {
        Self::open_locking(dir, memory_mb, false)
    }

    fn open_locking(dir: PathBuf, memory_mb: u64, wait: bool) -> Result<Option<(TaskStore, i64)>, String> {
        crate::private_dir::create(&dir).map_err(|e| format!("cannot create the state directory {}: {e}", dir.display()))?;
        // Nothing is read or wiped before the store is ours: another copy
        // on this machine, or this task's previous incarnation still
        // closing, may hold it.
        let Some(lock) = lock_store(&dir, wait)? else { return Ok(None) };
        let checkpoint = dir.join(CHECKPOINT);
        let from = std::fs::read_to_string(&checkpoint).ok().and_then(|s| s.trim().parse::<i64>().ok());
        let db_dir = dir.join("rocksdb");
        if from.is_none() && db_dir.exists() {
            tracing::info!("the state store {} has no clean checkpoint: wiping it to restore from the changelog", dir.display());
            std::fs::remove_dir_all(&db_dir).map_err(|e| format!("cannot wipe the state store {}: {e}", db_dir.display()))?;
        }
        let mut opts = Options::default();
        opts.create_if_missing(true);
        let memory = shared_memory(memory_mb);
        opts.set_write_buffer_manager(&memory.buffers);
        opts.set_write_buffer_size(WRITE_BUFFER_BYTES);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&memory.cache);
        opts.set_block_based_table_factory(&table);
        // The previous incarnation of the task in this process may still be
        // closing the store (its actor stops asynchronously): wait for its lock.
        let mut attempt = 0;
        let db = loop {
            match DB::open(&opts, &db_dir) {
                Ok(db) => break db,
                Err(e) if attempt < 50 && e.to_string().contains("lock") => {
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(e) => return Err(format!("cannot open the state store {}: {e}", db_dir.display())),
            }
        };
        // From here on a crash must not find a checkpoint.
        if checkpoint.exists() {
            std::fs::remove_file(&checkpoint).map_err(|e| format!("cannot remove {}: {e}", checkpoint.display()))?;
        }
        Ok(Some((TaskStore { db, dir, _lock: lock }, from.unwrap_or(0))))
    }

    /// Applies committed changes (`None` deletes) in one atomic write.
    ///
    /// Without RocksDB's write-ahead log (as Kafka Streams' stores): a store
    /// is trusted only after a clean close, which flushes its memtables
    /// before the checkpoint, so the log would only ever be replayed into a
    /// store that is then wiped. It cost a file write per commit.
    pub fn apply(&self, changes: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<(), String> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::default();
        for (k, v) in changes {
            match v {
                Some(v) => batch.put(k, v),
                None => batch.delete(k),
            }
        }
        let mut unlogged = WriteOptions::default();
        unlogged.disable_wal(true);
        self.db.write_opt(batch, &unlogged).map_err(|e| format!("cannot write the state store: {e}"))
    }

    /// RocksDB's estimate of the store's size: live data plus memtables.
    pub fn approximate_bytes(&self) -> Option<u64> {
        let live = self.db.property_int_value("rocksdb.estimate-live-data-size").ok().flatten()?;
        let memtables = self.db.property_int_value("rocksdb.cur-size-all-mem-tables").ok().flatten().unwrap_or(0);
        Some(live + memtables)
    }

    /// Every entry, in key order.
    #[cfg(test)]
    pub fn entries(&self) -> Result<Entries, String> {
        self.db
            .iterator(rocksdb::IteratorMode::Start)
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).map_err(|e| format!("cannot read the state store: {e}")))
            .collect()
    }

    /// Whether any key starts with `prefix`.
    pub fn has_prefix(&self, prefix: &[u8]) -> Result<bool, String> {
        Ok(self.key_at_or_after(prefix)?.is_some_and(|k| k.starts_with(prefix)))
    }

    /// Visits the entries from `start` on, in key order, while `visit`
    /// returns true (a GroupByKey's pass over its evicted panes: read ahead,
    /// and not kept in the block cache, which holds what is read again).
    pub fn scan(&self, start: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), String> {
        let mut read = rocksdb::ReadOptions::default();
        read.set_readahead_size(2 << 20);
        read.fill_cache(false);
        self.visit_from(read, start, visit)
    }

    fn visit_from(&self, read: rocksdb::ReadOptions, start: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), String> {
        let mut it = self.db.raw_iterator_opt(read);
        it.seek(start);
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            if !visit(k, v) {
                return Ok(());
            }
            it.next();
        }
        it.status().map_err(|e| format!("cannot read the state store: {e}"))
    }

    /// On a clean close: the store is current up to changelog offset `next`.
    pub fn write_checkpoint(&self, next: i64) -> Result<(), String> {
        self.db.flush().map_err(|e| format!("cannot flush the state store: {e}"))?;
        let tmp = self.dir.join(format!("{CHECKPOINT}.tmp"));
        std::fs::write(&tmp, next.to_string()).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, self.dir.join(CHECKPOINT)).map_err(|e| format!("cannot write the checkpoint: {e}"))
    }
}

/// User state read as it is used (`UserState::lazy`): point reads by
/// prefix, kept in the shared block cache.
impl beam_kafka_runtime::state::user_state::StoredCells for TaskStore {
    fn scan_prefix(&self, prefix: &[u8], visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), String> {
        self.visit_from(rocksdb::ReadOptions::default(), prefix, &mut |k, v| {
            let inside = k.starts_with(prefix);
            if inside {
                visit(k, v);
            }
            inside
        })
    }

    fn key_at_or_after(&self, from: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let mut it = self.db.raw_iterator();
        it.seek(from);
        it.status().map_err(|e| format!("cannot read the state store: {e}"))?;
        Ok(it.key().map(<[u8]>::to_vec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_store_is_not_deleted_nor_one_the_runner_did_not_make() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("app").join("0_0");
        let (store, _) = TaskStore::open(dir.clone(), 16).unwrap();
        assert!(!remove_store_dir(&dir).unwrap(), "an open store stays");
        assert!(dir.join("rocksdb").exists());
        drop(store);
        assert!(remove_store_dir(&dir).unwrap());
        assert!(!dir.exists());
        // A directory the runner did not make is left alone.
        std::fs::create_dir_all(&dir).unwrap();
        assert!(!remove_store_dir(&dir).unwrap());
        assert!(dir.exists());
    }

    #[test]
    fn a_store_without_a_clean_checkpoint_is_wiped() {
        let dir = std::env::temp_dir().join(format!("beam-kafka-store-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (store, from) = TaskStore::open(dir.clone(), 64).unwrap();
        assert_eq!(from, 0);
        store.apply(&[(b"a".to_vec(), Some(b"1".to_vec())), (b"b".to_vec(), Some(b"2".to_vec()))]).unwrap();
        store.apply(&[(b"a".to_vec(), None)]).unwrap();
        store.write_checkpoint(42).unwrap();
        drop(store);
        // A clean close: reopened with its contents and offset.
        let (store, from) = TaskStore::open(dir.clone(), 64).unwrap();
        assert_eq!(from, 42);
        assert_eq!(store.entries().unwrap(), vec![(b"b".to_vec(), b"2".to_vec())]);
        drop(store);
        // No checkpoint this time (as after a crash): wiped.
        let (store, from) = TaskStore::open(dir.clone(), 64).unwrap();
        assert_eq!(from, 0);
        assert!(store.entries().unwrap().is_empty());
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
