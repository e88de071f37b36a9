//! The simulated HCCL across processes of one machine (one process per NPU, as torchrun
//! launches them) — **a simulation, not CANN's HCCL**, which links ranks over RoCE / HCCS.
//!
//! `HcclGetRootInfo` opens the *meeting point*: a Unix socket in a per-job folder of the temp
//! directory (`acl-sim-hccl-<pid>-<id>/root.sock`, readable by this user only), whose path the
//! root info carries (after the magic and the id: the root's process id, the path's length and
//! bytes). The root info travels to the other processes as it does on hardware (the
//! rendezvous of `burn_ascend_cann::hccl::launch`). A rank whose process did not make the root
//! info connects there in `HcclCommInitRootInfo` and takes its seat in the group kept in the
//! root's process ([`super::join`]: the same checks and connect timeout as in-process ranks);
//! a thread of the root's process then stands in for it, bringing each of its collectives to
//! the group's meeting ([`super::meet`]: the same agreement checks, rank-order reduction,
//! execution timeout and poisoning) and sending back its result or error. Once every rank has
//! joined, the socket and its folder are removed.
//!
//! Losses: a rank's process that ends without `HcclCommDestroy` (killed, crashed) closes its
//! connection, which marks it lost at once: the others' collectives waiting for it, or reaching
//! it later, fail with `HCCL_E_REMOTE` naming it. The root's process lost cuts every other
//! rank's connection: their collectives fail with `HCCL_E_REMOTE` naming rank 0.
//!
//! Wire format (little-endian): hello `ASHJ`, rank `u32`, nRanks `u32`, device `i32`, node
//! (`u16` length + bytes); answer status `i32` (+ message `u32` length + bytes when not 0). A
//! collective: `1`, sequence `u64`, call (tag `u8`, count `u64`, dtype `i32`, op `i32`, root
//! `u32`), data (`u64` length + bytes); its answer: status `i32`, then data or a message. `2`:
//! the rank destroyed its communicator.

use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use burn_ascend_cann::hccl::ffi::*;

use super::{connect_timeout, exec_timeout, join, meet, Arrival, Call, Group, Seat, ROOTS};
use crate::state::{lock, SimErr, SimResult};

const HELLO: &[u8; 4] = b"ASHJ";
const COLLECTIVE: u8 = 1;
const LEAVE: u8 = 2;
/// Where the root's process id and the socket path sit in the root info.
const PID_AT: usize = 24;
const PATH_AT: usize = 30;
/// What a rank of another process waits for an answer beyond the root's execution timeout
/// (the root answers a timeout itself).
const ANSWER_MARGIN: Duration = Duration::from_secs(30);

fn io_err(status: HcclResult, what: impl std::fmt::Display) -> SimErr {
    SimErr(status, what.to_string())
}

/// Whether root info `info` was made by this process (its ranks join in-process).
pub(super) fn made_here(info: &HcclRootInfo) -> bool {
    let pid = u32::from_le_bytes(info.internal[PID_AT..PID_AT + 4].try_into().expect("4"));
    pid == std::process::id()
}

/// `HcclGetRootInfo`'s meeting point for root info `id`: binds the socket, writes this
/// process's id and the path into `info`, and serves joins until every rank joined or the
/// connect timeout passed.
pub(super) fn open_meeting_point(id: u64, info: &mut HcclRootInfo) -> SimResult<()> {
    let dir = std::env::temp_dir().join(format!("acl-sim-hccl-{}-{id:x}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| {
            io_err(
                HCCL_E_INTERNAL,
                format!("HcclGetRootInfo: {}: {e}", dir.display()),
            )
        })?;
    let path = dir.join("root.sock");
    let bytes = path.as_os_str().as_encoded_bytes();
    // A Unix socket path holds at most 107 bytes.
    if bytes.len() > 107 || PATH_AT + bytes.len() > HCCL_ROOT_INFO_BYTES {
        let _ = std::fs::remove_dir(&dir);
        return Err(io_err(
            HCCL_E_INTERNAL,
            format!(
                "HcclGetRootInfo: the socket path {} is longer than 107 bytes (set TMPDIR to a shorter folder)",
                path.display()
            ),
        ));
    }
    let listener = UnixListener::bind(&path).map_err(|e| {
        let _ = std::fs::remove_dir(&dir);
        io_err(
            HCCL_E_INTERNAL,
            format!("HcclGetRootInfo: {}: {e}", path.display()),
        )
    })?;
    info.internal[PID_AT..PID_AT + 4].copy_from_slice(&std::process::id().to_le_bytes());
    info.internal[PID_AT + 4..PATH_AT].copy_from_slice(&(bytes.len() as u16).to_le_bytes());
    info.internal[PATH_AT..PATH_AT + bytes.len()].copy_from_slice(bytes);
    let deadline = Instant::now() + connect_timeout();
    std::thread::Builder::new()
        .name("acl-sim-hccl-root".into())
        .spawn(move || serve_joins(id, listener, &dir, deadline))
        .map_err(|e| io_err(HCCL_E_INTERNAL, format!("HcclGetRootInfo: thread: {e}")))?;
    Ok(())
}

fn everyone_joined(id: u64) -> bool {
    let group = lock(&ROOTS).as_ref().and_then(|r| r.get(&id).cloned());
    group.is_some_and(|g| lock(&g.state).joined.iter().all(Option::is_some))
}

fn serve_joins(id: u64, listener: UnixListener, dir: &Path, deadline: Instant) {
    if listener.set_nonblocking(true).is_ok() {
        while Instant::now() < deadline && !everyone_joined(id) {
            match listener.accept() {
                Ok((conn, _)) => {
                    let _ = std::thread::Builder::new()
                        .name("acl-sim-hccl-rank".into())
                        .spawn(move || stand_in(id, conn));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
    drop(listener);
    let _ = std::fs::remove_file(dir.join("root.sock"));
    let _ = std::fs::remove_dir(dir);
}

fn read_u32(r: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn read_u64(r: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn read_bytes(r: &mut impl Read, n: usize) -> std::io::Result<Vec<u8>> {
    let mut v = vec![0u8; n];
    r.read_exact(&mut v)?;
    Ok(v)
}

fn answer(w: &mut impl Write, result: &SimResult<Vec<u8>>) -> std::io::Result<()> {
    let mut out = Vec::new();
    match result {
        Ok(data) => {
            out.extend_from_slice(&HCCL_SUCCESS.to_le_bytes());
            out.extend_from_slice(&(data.len() as u64).to_le_bytes());
            out.extend_from_slice(data);
        }
        Err(SimErr(status, msg)) => {
            out.extend_from_slice(&status.to_le_bytes());
            out.extend_from_slice(&(msg.len() as u32).to_le_bytes());
            out.extend_from_slice(msg.as_bytes());
        }
    }
    w.write_all(&out)
}

/// Reads an answer: the data, or the error it carries.
fn read_answer(r: &mut impl Read) -> std::io::Result<SimResult<Vec<u8>>> {
    let status = read_u32(r)? as i32;
    if status == HCCL_SUCCESS {
        let n = read_u64(r)? as usize;
        return Ok(Ok(read_bytes(r, n)?));
    }
    let n = read_u32(r)? as usize;
    let msg = String::from_utf8_lossy(&read_bytes(r, n)?).into_owned();
    Ok(Err(SimErr(status, msg)))
}

fn encode_call(call: &Call) -> Vec<u8> {
    let (tag, count, dtype, op, root) = match *call {
        Call::AllReduce { count, dtype, op } => (0u8, count, dtype.raw(), op.raw(), 0),
        Call::Broadcast { count, dtype, root } => (1, count, dtype.raw(), 0, root),
        Call::AllGather { count, dtype } => (2, count, dtype.raw(), 0, 0),
        Call::ReduceScatter { count, dtype, op } => (3, count, dtype.raw(), op.raw(), 0),
        Call::Barrier => (4, 0, 0, 0, 0),
    };
    let mut v = vec![tag];
    v.extend_from_slice(&count.to_le_bytes());
    v.extend_from_slice(&dtype.to_le_bytes());
    v.extend_from_slice(&op.to_le_bytes());
    v.extend_from_slice(&root.to_le_bytes());
    v
}

fn decode_call(r: &mut impl Read) -> std::io::Result<Option<Call>> {
    let mut tag = [0u8; 1];
    r.read_exact(&mut tag)?;
    let count = read_u64(r)?;
    let dtype = read_u32(r)? as i32;
    let op = read_u32(r)? as i32;
    let root = read_u32(r)?;
    let dt = HcclDataType::from_raw(dtype);
    let rop = ReduceOp::from_raw(op);
    Ok(match (tag[0], dt, rop) {
        (0, Some(dtype), Some(op)) => Some(Call::AllReduce { count, dtype, op }),
        (1, Some(dtype), _) => Some(Call::Broadcast { count, dtype, root }),
        (2, Some(dtype), _) => Some(Call::AllGather { count, dtype }),
        (3, Some(dtype), Some(op)) => Some(Call::ReduceScatter { count, dtype, op }),
        (4, _, _) => Some(Call::Barrier),
        _ => None,
    })
}

/// The root process's stand-in for one rank of another process: its join, then each of its
/// collectives at the group's meeting, until it leaves or its connection closes.
fn stand_in(id: u64, mut conn: UnixStream) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(connect_timeout() + ANSWER_MARGIN));
    let hello = (|| -> std::io::Result<Option<(u32, u32, Seat)>> {
        let magic = read_bytes(&mut conn, 4)?;
        if magic != HELLO {
            return Ok(None);
        }
        let rank = read_u32(&mut conn)?;
        let n_ranks = read_u32(&mut conn)?;
        let device = read_u32(&mut conn)? as i32;
        let mut len = [0u8; 2];
        conn.read_exact(&mut len)?;
        let node = read_bytes(&mut conn, u16::from_le_bytes(len) as usize)?;
        let node = String::from_utf8_lossy(&node).into_owned();
        Ok(Some((rank, n_ranks, Seat { node, device })))
    })();
    let Ok(Some((rank, n_ranks, seat))) = hello else {
        return;
    };
    let group = match join(id, n_ranks, rank, seat, true) {
        Ok(g) => g,
        Err(e) => {
            let _ = answer(&mut conn, &Err(e));
            return;
        }
    };
    let _ = conn.set_read_timeout(None);
    let told = answer(&mut conn, &Ok(Vec::new()));
    {
        let mut st = lock(&group.state);
        st.welcomed += 1;
        group.changed.notify_all();
    }
    let lost = told.is_err() || serve_rank(&group, rank, &mut conn);
    let mut st = lock(&group.state);
    st.destroyed[rank as usize] = true;
    st.lost[rank as usize] = lost;
    st.remote_live -= 1;
    group.changed.notify_all();
}

/// Serves rank `rank`'s collectives; `true` when its connection closed without it leaving.
fn serve_rank(group: &Group, rank: u32, conn: &mut UnixStream) -> bool {
    loop {
        let mut kind = [0u8; 1];
        if conn.read_exact(&mut kind).is_err() {
            return true;
        }
        if kind[0] == LEAVE {
            return false;
        }
        let request = (|| -> std::io::Result<(u64, Option<Call>, Vec<u8>)> {
            let seq = read_u64(conn)?;
            let call = decode_call(conn)?;
            let n = read_u64(conn)? as usize;
            Ok((seq, call, read_bytes(conn, n)?))
        })();
        let Ok((seq, call, data)) = request else {
            return true;
        };
        let result = match call {
            Some(call) => meet(group, rank, seq, Arrival { call, data }),
            None => Err(SimErr(
                HCCL_E_PARA,
                format!("collective #{seq} of rank {rank}: not a collective of this simulation"),
            )),
        };
        if kind[0] != COLLECTIVE || answer(conn, &result).is_err() {
            return true;
        }
    }
}

/// A rank whose communicator lives in another process (the root's).
pub(super) struct Remote {
    rank: u32,
    conn: Mutex<Option<UnixStream>>,
    next: AtomicU64,
    /// The first failure: every later collective fails with it (HCCL's poisoning).
    failed: Mutex<Option<(HcclResult, String)>>,
    exec_timeout: Duration,
}

impl Remote {
    /// Connects to the meeting point `info` names and takes rank `rank`'s seat; waits until
    /// every rank joined (the root's connect timeout), or fails with the root's error.
    pub(super) fn join(
        info: &HcclRootInfo,
        n_ranks: u32,
        rank: u32,
        seat: Seat,
    ) -> SimResult<Self> {
        let call = names::comm_init_root_info;
        let len = u16::from_le_bytes(info.internal[PID_AT + 4..PATH_AT].try_into().expect("2"));
        let bytes = info
            .internal
            .get(PATH_AT..PATH_AT + len as usize)
            .ok_or_else(|| io_err(HCCL_E_PARA, format!("{call}: rootInfo is damaged")))?;
        let path = PathBuf::from(String::from_utf8_lossy(bytes).into_owned());
        let mut conn = UnixStream::connect(&path).map_err(|e| {
            io_err(
                HCCL_E_TCP_CONNECT,
                format!(
                    "{call}: rank {rank} cannot reach the root's process at {} ({e}): it ended, or every rank already joined",
                    path.display()
                ),
            )
        })?;
        let lost = |e: std::io::Error| {
            io_err(
                HCCL_E_TCP_CONNECT,
                format!("{call}: rank {rank}: the root's process closed the join ({e})"),
            )
        };
        conn.set_read_timeout(Some(connect_timeout() + ANSWER_MARGIN))
            .map_err(lost)?;
        let node = seat.node.as_bytes();
        let mut hello = HELLO.to_vec();
        hello.extend_from_slice(&rank.to_le_bytes());
        hello.extend_from_slice(&n_ranks.to_le_bytes());
        hello.extend_from_slice(&seat.device.to_le_bytes());
        hello.extend_from_slice(&(node.len() as u16).to_le_bytes());
        hello.extend_from_slice(node);
        conn.write_all(&hello).map_err(lost)?;
        read_answer(&mut conn).map_err(lost)??;
        Ok(Self {
            rank,
            conn: Mutex::new(Some(conn)),
            next: AtomicU64::new(0),
            failed: Mutex::new(None),
            exec_timeout: exec_timeout(),
        })
    }

    /// The sequence number of this rank's next collective.
    pub(super) fn next_seq(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst)
    }

    /// Brings `arrival` to collective `seq`'s meeting in the root's process and returns this
    /// rank's result.
    pub(super) fn meet(&self, seq: u64, arrival: Arrival) -> SimResult<Vec<u8>> {
        let mut conn = lock(&self.conn);
        if let Some((s, msg)) = lock(&self.failed).as_ref() {
            return Err(SimErr(
                *s,
                format!("rank {}: the communicator failed earlier: {msg}", self.rank),
            ));
        }
        let call = arrival.call;
        let result = match conn.as_mut() {
            None => Err(SimErr(
                HCCL_E_PARA,
                format!(
                    "{call} #{seq} on rank {}: its communicator was destroyed",
                    self.rank
                ),
            )),
            Some(c) => self.exchange(c, seq, arrival).unwrap_or_else(|e| {
                let timed_out = matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                );
                Err(if timed_out {
                    SimErr(
                        HCCL_E_TIMEOUT,
                        format!(
                            "collective #{seq} ({call}): rank 0's process did not answer within {:?} (HCCL_EXEC_TIMEOUT and a margin)",
                            self.exec_timeout + ANSWER_MARGIN
                        ),
                    )
                } else {
                    SimErr(
                        HCCL_E_REMOTE,
                        format!(
                            "collective #{seq} ({call}): rank 0's process was lost (its connection closed: {e}; killed or crashed)"
                        ),
                    )
                })
            }),
        };
        if let Err(SimErr(s, msg)) = &result {
            lock(&self.failed).get_or_insert((*s, msg.clone()));
        }
        result
    }

    fn exchange(
        &self,
        conn: &mut UnixStream,
        seq: u64,
        arrival: Arrival,
    ) -> std::io::Result<SimResult<Vec<u8>>> {
        let mut out = vec![COLLECTIVE];
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&encode_call(&arrival.call));
        out.extend_from_slice(&(arrival.data.len() as u64).to_le_bytes());
        out.extend_from_slice(&arrival.data);
        conn.write_all(&out)?;
        conn.set_read_timeout(Some(self.exec_timeout + ANSWER_MARGIN))?;
        read_answer(conn)
    }

    /// `HcclCommDestroy`: tells the root's process this rank left.
    pub(super) fn leave(&self) {
        if let Some(mut c) = lock(&self.conn).take() {
            let _ = c.write_all(&[LEAVE]);
        }
    }
}
