//! Durable file operations for checkpoints: every write is followed by an `fsync` of the file,
//! directories are fsynced after their entries change, and every operation passes through one
//! counted hook so that a test can stop the process at any of them.
//!
//! The hook: with `BURN_ASCEND_KILL_AT_FILE_OP=N` in the environment, the process stops just
//! *before* its N-th file operation (counting from 1), prints
//! `burn-ascend: stopped before file op N (<what> <path>)` to stderr and waits to be killed
//! (the kill test sends SIGKILL when it reads that line; after 60 s without one the process
//! aborts). N past the last operation lets the run finish. Without the variable the hook only
//! counts. `BURN_ASCEND_COUNT_FILE_OPS=1` prints `burn-ascend: file op N <what> <path>` for
//! every operation instead, which is how the test learns how many there are.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use burn_ascend::AttnError;

/// The environment variable that stops the process before its N-th file operation.
pub const KILL_AT_FILE_OP: &str = "BURN_ASCEND_KILL_AT_FILE_OP";
/// The environment variable that lists every file operation on stderr.
pub const COUNT_FILE_OPS: &str = "BURN_ASCEND_COUNT_FILE_OPS";

static OPS: AtomicUsize = AtomicUsize::new(0);

fn kill_at() -> Option<usize> {
    static AT: OnceLock<Option<usize>> = OnceLock::new();
    *AT.get_or_init(|| std::env::var(KILL_AT_FILE_OP).ok()?.trim().parse().ok())
}

fn listing() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(COUNT_FILE_OPS).is_some())
}

/// File operations done so far by this process (through this module).
pub fn file_ops() -> usize {
    OPS.load(Ordering::SeqCst)
}

/// Counts one operation; stops the process before it when the kill hook asks for this one.
fn op(what: &str, path: &Path) {
    let n = OPS.fetch_add(1, Ordering::SeqCst) + 1;
    if listing() {
        eprintln!("burn-ascend: file op {n} {what} {}", path.display());
    }
    if kill_at() == Some(n) {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(
            err,
            "burn-ascend: stopped before file op {n} ({what} {})",
            path.display()
        );
        let _ = err.flush();
        drop(err);
        std::thread::sleep(Duration::from_secs(60));
        // Nobody killed it: end as abruptly as a kill would.
        std::process::abort();
    }
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> AttnError {
    AttnError::invalid("checkpoint", format!("{}: {e}", path.display()))
}

/// Creates (or truncates) `path`, writes `bytes` and fsyncs the file: two operations.
pub fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), AttnError> {
    op("write", path);
    let mut f = std::fs::File::create(path).map_err(|e| io_err(path, e))?;
    f.write_all(bytes).map_err(|e| io_err(path, e))?;
    op("fsync", path);
    f.sync_all().map_err(|e| io_err(path, e))
}

/// Creates (or truncates) `path`, writes the pieces `pieces` yields one after the other (so
/// the whole content is never held at once) and fsyncs the file: two operations, as
/// [`write_synced`]. Returns the bytes written and their CRC-32 (IEEE).
pub fn write_synced_pieces(
    path: &Path,
    pieces: impl Iterator<Item = Result<Vec<u8>, AttnError>>,
) -> Result<(u64, u32), AttnError> {
    op("write", path);
    let mut f = std::fs::File::create(path).map_err(|e| io_err(path, e))?;
    let (mut len, mut crc) = (0u64, crc32fast::Hasher::new());
    for piece in pieces {
        let piece = piece?;
        f.write_all(&piece).map_err(|e| io_err(path, e))?;
        crc.update(&piece);
        len += piece.len() as u64;
    }
    op("fsync", path);
    f.sync_all().map_err(|e| io_err(path, e))?;
    Ok((len, crc.finalize()))
}

/// Fsyncs a directory, making the entries created, renamed or removed in it durable.
pub fn sync_dir(dir: &Path) -> Result<(), AttnError> {
    op("fsync-dir", dir);
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err(dir, e))
}

/// Creates the directory `dir` (its parent must exist).
pub fn create_dir(dir: &Path) -> Result<(), AttnError> {
    op("mkdir", dir);
    std::fs::create_dir(dir).map_err(|e| io_err(dir, e))
}

/// Renames `from` to `to`, replacing `to` atomically.
pub fn rename(from: &Path, to: &Path) -> Result<(), AttnError> {
    op("rename", to);
    std::fs::rename(from, to).map_err(|e| io_err(to, e))
}

/// Removes the directory `dir` and everything in it (already gone is no error: the ranks of
/// a multi-process run may tidy the same folder at once).
pub fn remove_dir_all(dir: &Path) -> Result<(), AttnError> {
    op("remove", dir);
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(dir, e)),
        _ => Ok(()),
    }
}

/// Removes the file `path` when it exists.
pub fn remove_file_if_present(path: &Path) -> Result<(), AttnError> {
    if path.symlink_metadata().is_err() {
        return Ok(());
    }
    op("remove", path);
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(path, e)),
        _ => Ok(()),
    }
}

/// Makes `to` a second name of the (already fsynced) file `from`; copies and fsyncs it where
/// the file system has no hard links.
pub fn link_or_copy(from: &Path, to: &Path) -> Result<(), AttnError> {
    op("link", to);
    if std::fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    let bytes = std::fs::read(from).map_err(|e| io_err(from, e))?;
    let mut f = std::fs::File::create(to).map_err(|e| io_err(to, e))?;
    f.write_all(&bytes).map_err(|e| io_err(to, e))?;
    f.sync_all().map_err(|e| io_err(to, e))
}
