//! **A host simulation of HCCL's C ABI — not CANN's HCCL**: communicators over the
//! simulation's devices in one process, and collectives queued on the simulated device streams.
//!
//! - `HcclCommInitAll(ndev, devices, comms)` makes one communicator per listed device;
//!   `HcclGetRootInfo` + `HcclCommInitRootInfo` do the same for ranks that join separately
//!   (threads standing in for processes), blocking until all `nRanks` have joined or
//!   `HCCL_CONNECT_TIMEOUT` passed (`HCCL_E_TIMEOUT`, naming the missing ranks). A rank's
//!   device is the one bound to its thread (`aclrtSetDevice`); two ranks on one device are
//!   refused.
//! - `HcclAllReduce`, `HcclBroadcast`, `HcclAllGather`, `HcclReduceScatter`, `HcclBarrier`
//!   validate their arguments at the call, as HCCL does (null buffer → `HCCL_E_PTR`; unknown
//!   or destroyed communicator, bad dtype / reduce op / root, a zero gather/scatter count, a
//!   buffer outside the device allocations (all-gather's `recvBuf` and reduce-scatter's
//!   `sendBuf` hold `rankSize × count`), a stream of another device → `HCCL_E_PARA`; a dtype the simulation does not reduce → `HCCL_E_NOT_SUPPORT`), then queue
//!   a task on the rank's stream. A rank's *n*-th collective meets every other rank's *n*-th
//!   (HCCL's rule: every rank issues the same collectives in the same order) when its stream
//!   worker gets to it; it waits there for the others.
//! - When all have arrived the task checks that they agree (the collective, count, dtype,
//!   reduce op, root) and computes **in rank order** (all-gather: rank 0's block first;
//!   reduce-scatter: rank r gets block r of every rank, reduced; all-reduce and reduce-scatter
//!   add rank 0 + rank 1 + …, f16 / bf16 accumulated in f32 and rounded once), so results are deterministic and equal on every
//!   rank. A disagreement fails the collective on every rank with `HCCL_E_PARA` naming both
//!   ranks' calls; a rank missing past `HCCL_EXEC_TIMEOUT` (or [`set_exec_timeout`]) fails
//!   it with `HCCL_E_TIMEOUT` naming the missing ranks; a rank whose communicator was destroyed
//!   (its thread failed) fails the others at once with `HCCL_E_REMOTE`. After a failure the
//!   communicator is poisoned: every later collective fails with the first error, as HCCL's
//!   communicators are unusable after an error. The failure surfaces at the stream's next
//!   synchronisation with the HCCL status (an NPU reports a runtime status there and HCCL's
//!   through `HcclGetCommAsyncError`).
//! - Ranks in separate processes of one machine (one process per NPU, as torchrun launches
//!   them) join one communicator through the same entry points: `HcclGetRootInfo` opens a
//!   Unix socket in a per-job folder of the temp directory, named in the root info; a rank of
//!   another process connects to it in `HcclCommInitRootInfo`, and its collectives meet the
//!   others' in the root's process, through the same meeting, checks, rank-order reduction and
//!   poisoning as in-process ranks ([`across`]). The process that called `HcclGetRootInfo`
//!   must itself be one of the ranks (as rank 0 is under torchrun) and keeps the meeting point:
//!   its loss fails every other rank at once with `HCCL_E_REMOTE` naming rank 0.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use burn_ascend_cann::acl::ffi::AclrtStream;
use burn_ascend_cann::hccl::ffi::*;
use half::{bf16, f16};

mod across;

use crate::state::{
    current_device, device_count, device_range_ok, guard, lock, next_id, note_touched, read_device,
    stream_ok, with_device_mut, SimErr, SimResult,
};

fn err<T>(status: HcclResult, msg: impl Into<String>) -> SimResult<T> {
    Err(SimErr(status, msg.into()))
}

/// Overrides of `HCCL_EXEC_TIMEOUT` / `HCCL_CONNECT_TIMEOUT` (tests shorten them).
static EXEC_TIMEOUT: Mutex<Option<Duration>> = Mutex::new(None);
static CONNECT_TIMEOUT: Mutex<Option<Duration>> = Mutex::new(None);

/// Sets how long the collectives of communicators made from now on wait for the other ranks
/// (`None`: back to `$HCCL_EXEC_TIMEOUT` seconds, else HCCL's default 1836 s).
pub fn set_exec_timeout(t: Option<Duration>) {
    *lock(&EXEC_TIMEOUT) = t;
}

/// Sets how long `HcclCommInitRootInfo` waits for the other ranks (`None`: back to
/// `$HCCL_CONNECT_TIMEOUT` seconds, else HCCL's default 120 s).
pub fn set_connect_timeout(t: Option<Duration>) {
    *lock(&CONNECT_TIMEOUT) = t;
}

fn env_secs(name: &str, default_s: u64) -> Duration {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&s| s > 0)
        .map_or(Duration::from_secs(default_s), Duration::from_secs)
}

fn exec_timeout() -> Duration {
    lock(&EXEC_TIMEOUT).unwrap_or_else(|| env_secs("HCCL_EXEC_TIMEOUT", 1836))
}

fn connect_timeout() -> Duration {
    lock(&CONNECT_TIMEOUT).unwrap_or_else(|| env_secs("HCCL_CONNECT_TIMEOUT", 120))
}

/// What a rank called, compared across ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    AllReduce {
        count: u64,
        dtype: HcclDataType,
        op: ReduceOp,
    },
    Broadcast {
        count: u64,
        dtype: HcclDataType,
        root: u32,
    },
    AllGather {
        count: u64,
        dtype: HcclDataType,
    },
    ReduceScatter {
        count: u64,
        dtype: HcclDataType,
        op: ReduceOp,
    },
    Barrier,
}

impl Call {
    fn name(&self) -> &'static str {
        match self {
            Call::AllReduce { .. } => names::all_reduce,
            Call::Broadcast { .. } => names::broadcast,
            Call::AllGather { .. } => names::all_gather,
            Call::ReduceScatter { .. } => names::reduce_scatter,
            Call::Barrier => names::barrier,
        }
    }
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Call::AllReduce { count, dtype, op } => {
                write!(f, "HcclAllReduce(count {count}, {dtype:?}, {op:?})")
            }
            Call::Broadcast { count, dtype, root } => {
                write!(f, "HcclBroadcast(count {count}, {dtype:?}, root {root})")
            }
            Call::AllGather { count, dtype } => {
                write!(f, "HcclAllGather(sendCount {count}, {dtype:?})")
            }
            Call::ReduceScatter { count, dtype, op } => {
                write!(f, "HcclReduceScatter(recvCount {count}, {dtype:?}, {op:?})")
            }
            Call::Barrier => write!(f, "HcclBarrier"),
        }
    }
}

struct Arrival {
    call: Call,
    data: Vec<u8>,
}

struct Meeting {
    arrivals: Vec<Option<Arrival>>,
    /// Ranks that took their result.
    done: usize,
}

struct GroupState {
    /// Each rank's seat (node and device) once it joined.
    joined: Vec<Option<Seat>>,
    /// Ranks whose communicator was destroyed.
    destroyed: Vec<bool>,
    /// Ranks of other processes whose connection closed without `HcclCommDestroy`: the
    /// process was killed or crashed.
    lost: Vec<bool>,
    /// Ranks of other processes still connected to this (the root's) process.
    remote_live: usize,
    /// Ranks of other processes told that every rank joined.
    welcomed: usize,
    /// Collectives each rank has issued (its next collective's sequence number).
    issued: Vec<u64>,
    meetings: HashMap<u64, Meeting>,
    /// The first failure: every later collective fails with it.
    failed: Option<SimErr>,
}

struct Group {
    size: u32,
    /// `HCCL_EXEC_TIMEOUT` as read when the communicator was made (HCCL reads its
    /// environment at initialisation).
    exec_timeout: Duration,
    state: Mutex<GroupState>,
    changed: Condvar,
}

impl Group {
    fn new(size: u32) -> Arc<Self> {
        let n = size as usize;
        Arc::new(Self {
            size,
            exec_timeout: exec_timeout(),
            state: Mutex::new(GroupState {
                joined: vec![None; n],
                destroyed: vec![false; n],
                lost: vec![false; n],
                remote_live: 0,
                welcomed: 0,
                issued: vec![0; n],
                meetings: HashMap::new(),
                failed: None,
            }),
            changed: Condvar::new(),
        })
    }
}

/// Where a rank's device is: the simulated node (`$GROUP_RANK`, torchrun's node rank, else
/// 0) and the device index on it. Two ranks on one seat are refused.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seat {
    node: String,
    device: i32,
}

impl Seat {
    fn here(device: i32) -> Self {
        let node = std::env::var("GROUP_RANK")
            .ok()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| "0".into());
        Self { node, device }
    }
}

/// How a rank's collectives meet the others': in this process's group, or through the
/// connection to the root's process.
enum Link {
    Local(Arc<Group>),
    Remote(Arc<across::Remote>),
}

struct Member {
    link: Link,
    rank: u32,
    device: i32,
    size: u32,
}

/// Live communicators by handle value.
static COMMS: Mutex<Option<HashMap<usize, Arc<Member>>>> = Mutex::new(None);
/// Communicators being formed through root infos, by the root info's id.
static ROOTS: Mutex<Option<HashMap<u64, Arc<Group>>>> = Mutex::new(None);

/// Live simulated communicators (for leak tests).
pub fn live_communicators() -> usize {
    lock(&COMMS).as_ref().map_or(0, HashMap::len)
}

fn register(link: Link, rank: u32, device: i32, size: u32) -> usize {
    let id = next_id();
    lock(&COMMS).get_or_insert_with(HashMap::new).insert(
        id,
        Arc::new(Member {
            link,
            rank,
            device,
            size,
        }),
    );
    id
}

fn member(comm: HcclComm, call: &str) -> SimResult<Arc<Member>> {
    if comm.is_null() {
        return err(HCCL_E_PTR, format!("{call}: comm is null"));
    }
    lock(&COMMS)
        .as_ref()
        .and_then(|m| m.get(&(comm as usize)).cloned())
        .map_or_else(
            || {
                err(
                    HCCL_E_PARA,
                    format!("{call}: {comm:p} is not a live communicator"),
                )
            },
            Ok,
        )
}

const ROOT_MAGIC: &[u8; 16] = b"acl-sim-hccl-rt\0";

hccl_fn!(get_root_info, |p| {
    guard(|| {
        if p.root_info.is_null() {
            return err(HCCL_E_PTR, "HcclGetRootInfo: rootInfo is null");
        }
        let id = next_id() as u64 ^ (u64::from(std::process::id()) << 32);
        let mut info = HcclRootInfo::default();
        info.internal[..16].copy_from_slice(ROOT_MAGIC);
        info.internal[16..24].copy_from_slice(&id.to_le_bytes());
        // Ranks of other processes reach this one through the socket the root info names.
        across::open_meeting_point(id, &mut info)?;
        // SAFETY: non-null, points to an `HcclRootInfo` per the prototype.
        unsafe { p.root_info.write(info) };
        Ok(())
    })
});

/// Rank `rank` of `n_ranks` takes its seat in root info `id`'s group (made by the first rank
/// to arrive) and waits until every rank has, or `HCCL_CONNECT_TIMEOUT` passed. Ranks of this
/// process call it from `HcclCommInitRootInfo`, ranks of other processes through their
/// connection to this one.
fn join(id: u64, n_ranks: u32, rank: u32, seat: Seat, remote: bool) -> SimResult<Arc<Group>> {
    let call = names::comm_init_root_info;
    let group = {
        let mut roots = lock(&ROOTS);
        roots
            .get_or_insert_with(HashMap::new)
            .entry(id)
            .or_insert_with(|| Group::new(n_ranks))
            .clone()
    };
    if group.size != n_ranks {
        return err(
            HCCL_E_PARA,
            format!(
                "{call}: rank {rank} passed nRanks {n_ranks}, another rank {}",
                group.size
            ),
        );
    }
    let deadline = Instant::now() + connect_timeout();
    let mut st = lock(&group.state);
    if st.joined[rank as usize].is_some() {
        return err(HCCL_E_PARA, format!("{call}: rank {rank} joined twice"));
    }
    if let Some(other) = st.joined.iter().position(|d| d.as_ref() == Some(&seat)) {
        return err(
            HCCL_E_PARA,
            format!(
                "{call}: rank {rank} is on device {} of node {}, which rank {other} already uses",
                seat.device, seat.node
            ),
        );
    }
    st.joined[rank as usize] = Some(seat);
    if remote {
        st.remote_live += 1;
    }
    group.changed.notify_all();
    while st.joined.iter().any(Option::is_none) {
        let now = Instant::now();
        if now >= deadline {
            let missing: Vec<String> = st
                .joined
                .iter()
                .enumerate()
                .filter(|(_, d)| d.is_none())
                .map(|(r, _)| r.to_string())
                .collect();
            st.joined[rank as usize] = None;
            if remote {
                st.remote_live -= 1;
            }
            return err(
                HCCL_E_TIMEOUT,
                format!(
                    "{call}: rank {rank} waited {:?} (HCCL_CONNECT_TIMEOUT) for rank(s) {}",
                    connect_timeout(),
                    missing.join(", ")
                ),
            );
        }
        st = group
            .changed
            .wait_timeout(st, (deadline - now).min(Duration::from_millis(50)))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    // The root's process returns once the ranks of other processes were told, so that it may
    // end at once without cutting their joins off.
    let told = Instant::now() + Duration::from_secs(5);
    while !remote && st.welcomed < st.remote_live && Instant::now() < told {
        st = group
            .changed
            .wait_timeout(st, Duration::from_millis(10))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    drop(st);
    Ok(group)
}

hccl_fn!(comm_init_root_info, |p| {
    let (n_ranks, rank) = (p.n_ranks, p.rank);
    guard(|| {
        let call = names::comm_init_root_info;
        if p.root_info.is_null() || p.comm.is_null() {
            return err(
                HCCL_E_PTR,
                format!("{call}: rootInfo and comm must not be null"),
            );
        }
        if n_ranks == 0 || rank >= n_ranks {
            return err(
                HCCL_E_PARA,
                format!("{call}: rank {rank} of nRanks {n_ranks}"),
            );
        }
        // SAFETY: non-null, points to an `HcclRootInfo` per the prototype.
        let info = unsafe { &*p.root_info };
        if &info.internal[..16] != ROOT_MAGIC {
            return err(
                HCCL_E_PARA,
                format!("{call}: rootInfo was not written by HcclGetRootInfo"),
            );
        }
        let id = u64::from_le_bytes(info.internal[16..24].try_into().expect("8 bytes"));
        let device = current_device();
        let seat = Seat::here(device);
        let link = if across::made_here(info) {
            Link::Local(join(id, n_ranks, rank, seat, false)?)
        } else {
            Link::Remote(Arc::new(across::Remote::join(info, n_ranks, rank, seat)?))
        };
        let id_c = register(link, rank, device, n_ranks);
        // SAFETY: non-null out-pointer per the prototype.
        unsafe { *p.comm = id_c as HcclComm };
        Ok(())
    })
});

hccl_fn!(comm_init_all, |p| {
    guard(|| {
        let call = names::comm_init_all;
        if p.devices.is_null() || p.comms.is_null() {
            return err(
                HCCL_E_PTR,
                format!("{call}: devices and comms must not be null"),
            );
        }
        if p.ndev == 0 {
            return err(HCCL_E_PARA, format!("{call}: ndev is 0"));
        }
        // SAFETY: `devices` holds `ndev` ids per the prototype.
        let devs = unsafe { std::slice::from_raw_parts(p.devices, p.ndev as usize) }.to_vec();
        let count = device_count();
        for (i, &d) in devs.iter().enumerate() {
            if d < 0 || d as u32 >= count {
                return err(
                    HCCL_E_PARA,
                    format!("{call}: devices[{i}] = {d}, the simulation has {count} device(s)"),
                );
            }
            if devs[..i].contains(&d) {
                return err(HCCL_E_PARA, format!("{call}: device {d} is listed twice"));
            }
        }
        let group = Group::new(p.ndev);
        {
            let mut st = lock(&group.state);
            for (r, &d) in devs.iter().enumerate() {
                st.joined[r] = Some(Seat::here(d));
            }
        }
        for (r, &d) in devs.iter().enumerate() {
            let id = register(Link::Local(group.clone()), r as u32, d, p.ndev);
            // SAFETY: `comms` has room for `ndev` handles per the prototype.
            unsafe { *p.comms.add(r) = id as HcclComm };
        }
        Ok(())
    })
});

hccl_fn!(comm_destroy, |p| {
    guard(|| {
        let m = member(p.comm, names::comm_destroy)?;
        lock(&COMMS).as_mut().map(|c| c.remove(&(p.comm as usize)));
        match &m.link {
            Link::Local(group) => {
                let mut st = lock(&group.state);
                st.destroyed[m.rank as usize] = true;
                group.changed.notify_all();
                // The root's process keeps the meeting point: it stays until the ranks of
                // other processes have their last results (or have left), so that its exit
                // does not cut them off.
                // After a failure they only need their error: a short wait.
                let wait = if st.failed.is_some() {
                    group.exec_timeout.min(Duration::from_secs(10))
                } else {
                    group.exec_timeout
                };
                let deadline = Instant::now() + wait;
                while st.remote_live > 0 && Instant::now() < deadline {
                    st = group
                        .changed
                        .wait_timeout(st, Duration::from_millis(50))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
            Link::Remote(remote) => remote.leave(),
        }
        Ok(())
    })
});

hccl_fn!(get_error_string, |p| {
    let s: &'static std::ffi::CStr = match p.code {
        HCCL_SUCCESS => c"success",
        HCCL_E_PARA => c"parameter error",
        HCCL_E_PTR => c"empty pointer",
        HCCL_E_MEMORY => c"memory error",
        HCCL_E_INTERNAL => c"internal error",
        HCCL_E_NOT_SUPPORT => c"not support feature",
        HCCL_E_NOT_FOUND => c"not found specific resource",
        HCCL_E_UNAVAIL => c"resource unavailable",
        HCCL_E_TIMEOUT => c"timeout",
        HCCL_E_TCP_CONNECT => c"tcp connect fail",
        HCCL_E_RUNTIME => c"call runtime api fail",
        HCCL_E_REMOTE => c"error cqe",
        _ => c"unknown HCCL result",
    };
    s.as_ptr()
});

/// Validates what every collective shares and returns the caller's member.
fn common(call: &str, comm: HcclComm, stream: AclrtStream) -> SimResult<Arc<Member>> {
    let m = member(comm, call)?;
    let device = current_device();
    if device != m.device {
        return err(
            HCCL_E_PARA,
            format!(
                "{call}: rank {} belongs to device {}, but the calling thread is bound to device {device}",
                m.rank, m.device
            ),
        );
    }
    if !stream_ok(stream) {
        return err(
            HCCL_E_PARA,
            format!("{call}: {stream:p} is not a live stream"),
        );
    }
    Ok(m)
}

fn dtype(call: &str, raw: i32, reduce: bool) -> SimResult<HcclDataType> {
    let Some(dt) = HcclDataType::from_raw(raw) else {
        return err(
            HCCL_E_PARA,
            format!("{call}: dataType {raw} is not an HcclDataType"),
        );
    };
    if reduce
        && !matches!(
            dt,
            HcclDataType::Fp32
                | HcclDataType::Fp16
                | HcclDataType::Bfp16
                | HcclDataType::Fp64
                | HcclDataType::Int32
                | HcclDataType::Int64
        )
    {
        return err(
            HCCL_E_NOT_SUPPORT,
            format!("{call}: the simulation does not reduce {dt:?}"),
        );
    }
    Ok(dt)
}

fn buffer(call: &str, what: &str, ptr: *mut c_void, bytes: usize) -> SimResult<usize> {
    if bytes == 0 {
        return Ok(ptr as usize);
    }
    if ptr.is_null() {
        return err(HCCL_E_PTR, format!("{call}: {what} is null"));
    }
    if !device_range_ok(ptr as usize, bytes) {
        return err(
            HCCL_E_PARA,
            format!(
                "{call}: {what} ({bytes} bytes at {ptr:p}) is not inside one device allocation"
            ),
        );
    }
    note_touched(ptr as usize, bytes);
    Ok(ptr as usize)
}

/// Queues `call` on the rank's stream: its task reads `send` (when `send_bytes > 0`), meets
/// the other ranks' same-numbered collective, and writes the result to `recv`.
fn queue(
    m: Arc<Member>,
    stream: AclrtStream,
    call: Call,
    send: (usize, usize),
    recv: (usize, usize),
) -> SimResult<()> {
    let seq = match &m.link {
        Link::Local(group) => {
            let mut st = lock(&group.state);
            let s = st.issued[m.rank as usize];
            st.issued[m.rank as usize] += 1;
            s
        }
        Link::Remote(remote) => remote.next_seq(),
    };
    crate::state::enqueue(
        stream,
        call.name(),
        Box::new(move || {
            let data = if send.1 > 0 {
                read_device(send.0, send.1, call.name())?
            } else {
                Vec::new()
            };
            let arrival = Arrival { call, data };
            let out = match &m.link {
                Link::Local(group) => meet(group, m.rank, seq, arrival)?,
                Link::Remote(remote) => remote.meet(seq, arrival)?,
            };
            if recv.1 > 0 {
                with_device_mut(recv.0, recv.1, call.name(), |dst| dst.copy_from_slice(&out))?;
            }
            Ok(())
        }),
    )
}

/// The rank's arrival at collective `seq`: waits for every rank, checks they agree, returns
/// this rank's result.
fn meet(g: &Group, rank: u32, seq: u64, arrival: Arrival) -> SimResult<Vec<u8>> {
    let n = g.size as usize;
    let call = arrival.call;
    let timeout = g.exec_timeout;
    let deadline = Instant::now() + timeout;
    let mut st = lock(&g.state);
    let fail = |st: &mut GroupState, e: SimErr| -> SimErr {
        let e = st.failed.get_or_insert(e);
        g.changed.notify_all();
        SimErr(e.0, e.1.clone())
    };
    if let Some(SimErr(s, msg)) = &st.failed {
        return Err(SimErr(
            *s,
            format!("rank {}: the communicator failed earlier: {msg}", rank),
        ));
    }
    if st.destroyed[rank as usize] {
        return err(
            HCCL_E_PARA,
            format!(
                "{call} #{seq} on rank {}: its communicator was destroyed",
                rank
            ),
        );
    }
    st.meetings
        .entry(seq)
        .or_insert_with(|| Meeting {
            arrivals: (0..n).map(|_| None).collect(),
            done: 0,
        })
        .arrivals[rank as usize] = Some(arrival);
    g.changed.notify_all();
    loop {
        if let Some(SimErr(s, msg)) = &st.failed {
            return Err(SimErr(*s, msg.clone()));
        }
        let missing: Vec<usize> = st.meetings[&seq]
            .arrivals
            .iter()
            .enumerate()
            .filter(|(_, a)| a.is_none())
            .map(|(r, _)| r)
            .collect();
        if missing.is_empty() {
            break;
        }
        if let Some(&r) = missing.iter().find(|&&r| st.destroyed[r]) {
            let why = if st.lost[r] {
                format!("rank {r}'s process was lost before it got there (it ended without destroying its communicator: killed or crashed)")
            } else {
                format!("rank {r}'s communicator was destroyed before it got there (rank {r} failed or left)")
            };
            return Err(fail(
                &mut st,
                SimErr(HCCL_E_REMOTE, format!("collective #{seq} ({call}): {why}")),
            ));
        }
        let now = Instant::now();
        if now >= deadline {
            let names: Vec<String> = missing.iter().map(usize::to_string).collect();
            return Err(fail(
                &mut st,
                SimErr(
                    HCCL_E_TIMEOUT,
                    format!(
                        "collective #{seq} ({call}): rank(s) {} did not get there within {timeout:?} (HCCL_EXEC_TIMEOUT)",
                        names.join(", ")
                    ),
                ),
            ));
        }
        st = g
            .changed
            .wait_timeout(st, (deadline - now).min(Duration::from_millis(50)))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    let meeting = st.meetings.get(&seq).expect("present");
    let first = meeting.arrivals[0].as_ref().expect("arrived").call;
    if let Some(r) = (1..n).find(|&r| meeting.arrivals[r].as_ref().expect("arrived").call != first)
    {
        let other = meeting.arrivals[r].as_ref().expect("arrived").call;
        return Err(fail(
            &mut st,
            SimErr(
                HCCL_E_PARA,
                format!(
                    "collective #{seq} mismatch: rank 0 called {first}, rank {r} called {other} (every rank must issue the same collectives in the same order)"
                ),
            ),
        ));
    }
    let arrivals: Vec<&[u8]> = meeting
        .arrivals
        .iter()
        .map(|a| a.as_ref().expect("arrived").data.as_slice())
        .collect();
    let out = match first {
        Call::AllReduce { dtype, op, .. } => reduce(&arrivals, dtype, op),
        Call::Broadcast { root, .. } => arrivals[root as usize].to_vec(),
        // Rank order: rank 0's block first.
        Call::AllGather { .. } => arrivals.concat(),
        // This rank's block of every rank's buffer, reduced in rank order.
        Call::ReduceScatter { dtype, op, .. } => {
            let block = arrivals[0].len() / n;
            let at = rank as usize * block;
            let blocks: Vec<&[u8]> = arrivals.iter().map(|a| &a[at..at + block]).collect();
            reduce(&blocks, dtype, op)
        }
        Call::Barrier => Vec::new(),
    };
    let meeting = st.meetings.get_mut(&seq).expect("present");
    meeting.done += 1;
    if meeting.done == n {
        st.meetings.remove(&seq);
    }
    Ok(out)
}

/// Combines the ranks' buffers element by element in rank order.
fn reduce(parts: &[&[u8]], dtype: HcclDataType, op: ReduceOp) -> Vec<u8> {
    fn combine<T: Copy>(
        op: ReduceOp,
        a: T,
        b: T,
        add: fn(T, T) -> T,
        mul: fn(T, T) -> T,
        lt: fn(T, T) -> bool,
    ) -> T {
        match op {
            ReduceOp::Sum => add(a, b),
            ReduceOp::Prod => mul(a, b),
            ReduceOp::Max => {
                if lt(a, b) {
                    b
                } else {
                    a
                }
            }
            ReduceOp::Min => {
                if lt(b, a) {
                    b
                } else {
                    a
                }
            }
        }
    }
    macro_rules! run {
        ($acc:ty, $size:expr, $get:expr, $put:expr) => {{
            let n = parts[0].len() / $size;
            let mut out = Vec::with_capacity(parts[0].len());
            for i in 0..n {
                let at = |p: &[u8]| -> $acc { $get(&p[i * $size..(i + 1) * $size]) };
                let mut acc = at(parts[0]);
                for p in &parts[1..] {
                    acc = combine(op, acc, at(p), |a, b| a + b, |a, b| a * b, |a, b| a < b);
                }
                out.extend_from_slice(&$put(acc));
            }
            out
        }};
    }
    match dtype {
        HcclDataType::Fp32 => run!(
            f32,
            4,
            |b: &[u8]| f32::from_le_bytes(b.try_into().unwrap()),
            |v: f32| v.to_le_bytes()
        ),
        HcclDataType::Fp64 => run!(
            f64,
            8,
            |b: &[u8]| f64::from_le_bytes(b.try_into().unwrap()),
            |v: f64| v.to_le_bytes()
        ),
        HcclDataType::Fp16 => run!(
            f32,
            2,
            |b: &[u8]| f16::from_le_bytes(b.try_into().unwrap()).to_f32(),
            |v: f32| f16::from_f32(v).to_le_bytes()
        ),
        HcclDataType::Bfp16 => run!(
            f32,
            2,
            |b: &[u8]| bf16::from_le_bytes(b.try_into().unwrap()).to_f32(),
            |v: f32| bf16::from_f32(v).to_le_bytes()
        ),
        HcclDataType::Int32 => run!(
            i32,
            4,
            |b: &[u8]| i32::from_le_bytes(b.try_into().unwrap()),
            |v: i32| v.to_le_bytes()
        ),
        HcclDataType::Int64 => run!(
            i64,
            8,
            |b: &[u8]| i64::from_le_bytes(b.try_into().unwrap()),
            |v: i64| v.to_le_bytes()
        ),
        // Refused at the call (`dtype(.., reduce = true)`).
        other => unreachable!("the simulation does not reduce {other:?}"),
    }
}

hccl_fn!(all_reduce, |p| {
    guard(|| {
        let call = names::all_reduce;
        let m = common(call, p.comm, p.stream)?;
        let dt = dtype(call, p.data_type, true)?;
        let op = reduce_op(call, p.op)?;
        let bytes = bytes_of(call, "count", p.count, 1, dt)?;
        let send = buffer(call, "sendBuf", p.send_buf, bytes)?;
        let recv = buffer(call, "recvBuf", p.recv_buf, bytes)?;
        queue(
            m,
            p.stream,
            Call::AllReduce {
                count: p.count,
                dtype: dt,
                op,
            },
            (send, bytes),
            (recv, bytes),
        )
    })
});

hccl_fn!(broadcast, |p| {
    let root = p.root;
    guard(|| {
        let call = names::broadcast;
        let m = common(call, p.comm, p.stream)?;
        let dt = dtype(call, p.data_type, false)?;
        if root >= m.size {
            return err(
                HCCL_E_PARA,
                format!("{call}: root {root} is not a rank of {}", m.size),
            );
        }
        let bytes = bytes_of(call, "count", p.count, 1, dt)?;
        let at = buffer(call, "buf", p.buf, bytes)?;
        let is_root = m.rank == root;
        queue(
            m,
            p.stream,
            Call::Broadcast {
                count: p.count,
                dtype: dt,
                root,
            },
            (at, if is_root { bytes } else { 0 }),
            (at, if is_root { 0 } else { bytes }),
        )
    })
});

/// The `HcclReduceOp` of a raw `op`, or `HCCL_E_PARA`.
fn reduce_op(call: &str, op: i32) -> SimResult<ReduceOp> {
    ReduceOp::from_raw(op).ok_or_else(|| {
        SimErr(
            HCCL_E_PARA,
            format!("{call}: op {op} is not an HcclReduceOp"),
        )
    })
}

/// `count × size` without overflow, as bytes of `dt`.
fn bytes_of(call: &str, what: &str, count: u64, ranks: u32, dt: HcclDataType) -> SimResult<usize> {
    usize::try_from(count)
        .ok()
        .and_then(|c| c.checked_mul(ranks as usize))
        .and_then(|c| c.checked_mul(dt.size()))
        .ok_or_else(|| SimErr(HCCL_E_PARA, format!("{call}: {what} {count} overflows")))
}

hccl_fn!(all_gather, |p| {
    guard(|| {
        let call = names::all_gather;
        let m = common(call, p.comm, p.stream)?;
        let dt = dtype(call, p.data_type, false)?;
        if p.send_count == 0 {
            return err(HCCL_E_PARA, format!("{call}: sendCount is 0"));
        }
        let send_bytes = bytes_of(call, "sendCount", p.send_count, 1, dt)?;
        let recv_bytes = bytes_of(call, "sendCount", p.send_count, m.size, dt)?;
        let send = buffer(call, "sendBuf", p.send_buf, send_bytes)?;
        let recv = buffer(call, "recvBuf", p.recv_buf, recv_bytes)?;
        queue(
            m,
            p.stream,
            Call::AllGather {
                count: p.send_count,
                dtype: dt,
            },
            (send, send_bytes),
            (recv, recv_bytes),
        )
    })
});

hccl_fn!(reduce_scatter, |p| {
    guard(|| {
        let call = names::reduce_scatter;
        let m = common(call, p.comm, p.stream)?;
        let dt = dtype(call, p.data_type, true)?;
        let op = reduce_op(call, p.op)?;
        if p.recv_count == 0 {
            return err(HCCL_E_PARA, format!("{call}: recvCount is 0"));
        }
        let send_bytes = bytes_of(call, "recvCount", p.recv_count, m.size, dt)?;
        let recv_bytes = bytes_of(call, "recvCount", p.recv_count, 1, dt)?;
        let send = buffer(call, "sendBuf", p.send_buf, send_bytes)?;
        let recv = buffer(call, "recvBuf", p.recv_buf, recv_bytes)?;
        queue(
            m,
            p.stream,
            Call::ReduceScatter {
                count: p.recv_count,
                dtype: dt,
                op,
            },
            (send, send_bytes),
            (recv, recv_bytes),
        )
    })
});

hccl_fn!(barrier, |p| {
    guard(|| {
        let m = common(names::barrier, p.comm, p.stream)?;
        queue(m, p.stream, Call::Barrier, (0, 0), (0, 0))
    })
});

/// The simulated HCCL's table, generated from the cann crate's one list: each function the C
/// entry of its prototype over [`crate::Sim`]'s implementation (`hccl_fn!` above).
macro_rules! register_hccl {
    (fns { $($f:ident: $c:ident($p:ty)),* }) => {
        static HCCL_API: HcclApi = HcclApi {
            kind: burn_ascend_cann::acl::ApiKind::Simulation,
            $($f: <$p>::entry::<burn_ascend_cann::hccl::ffi::func::$f, crate::Sim>,)*
        };
    };
}

burn_ascend_cann::hccl_api_table!(register_hccl);

/// The simulated HCCL's function table (**not CANN's HCCL**).
pub fn hccl_api() -> &'static HcclApi {
    &HCCL_API
}
