//! The simulated HCCL (not CANN's) across processes: ranks in child processes of this test
//! binary join rank 0's communicator through `HcclGetRootInfo` / `HcclCommInitRootInfo` (the
//! root info handed over in a file, as the launch's rendezvous hands it over), reduce exactly
//! as threads of one process do, and a rank's process lost fails its peers at once naming it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use burn_ascend_acl_sim as sim;
use burn_ascend_cann::acl::{DataType, DeviceTensor, Runtime, TensorDesc};
use burn_ascend_cann::hccl::ffi::{HcclRootInfo, HCCL_E_REMOTE};
use burn_ascend_cann::hccl::{root_info, Communicator, HcclDataType, HcclError, ReduceOp};

const CHILD: &str = "ACL_SIM_HCCL_CHILD";
const LEN: usize = 1000;

fn up(rt: &Runtime, v: &[f32]) -> DeviceTensor {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    rt.upload(
        TensorDesc::contiguous(&[v.len()], DataType::Float).unwrap(),
        &bytes,
    )
    .unwrap()
}

fn down(t: &DeviceTensor) -> Vec<f32> {
    t.download()
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Rank `r`'s input: values whose f32 sum depends on the order they are added in.
fn input(r: usize) -> Vec<f32> {
    (0..LEN)
        .map(|i| {
            (1.0 + i as f32 * 0.37).powi(r as i32 + 1) * if r.is_multiple_of(2) { 1e7 } else { 0.3 }
        })
        .collect()
}

fn write_info(path: &Path, info: &HcclRootInfo) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, info.internal).unwrap();
    std::fs::rename(tmp, path).unwrap();
}

fn read_info(path: &Path) -> HcclRootInfo {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(b) = std::fs::read(path) {
            let mut info = HcclRootInfo::default();
            info.internal.copy_from_slice(&b);
            return info;
        }
        assert!(
            Instant::now() < deadline,
            "no root info in {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn join(info: &HcclRootInfo, n: u32, rank: u32) -> (Runtime, Communicator) {
    if sim::device_count() < n {
        sim::set_device_count(n);
    }
    let rt = sim::runtime_on(rank as i32).unwrap();
    let comm =
        Communicator::init_root_info(sim::hccl_api(), sim::api(), n, info, rank, rank as i32)
            .unwrap();
    (rt, comm)
}

/// The collectives every rank runs, its results concatenated: an all-reduce of [`input`], a
/// reduce-scatter of it and an all-gather of the reduce-scatter's block.
fn collectives(rt: &Runtime, comm: &Communicator) -> Result<Vec<f32>, HcclError> {
    let n = comm.size() as usize;
    let r = comm.rank() as usize;
    let t = up(rt, &input(r));
    comm.all_reduce(rt, &t.buf, &t.buf, LEN, HcclDataType::Fp32, ReduceOp::Sum)?;
    let block = LEN / n;
    let src = up(rt, &input(r));
    let part = up(rt, &vec![0.0; block]);
    comm.reduce_scatter(
        rt,
        &src.buf,
        &part.buf,
        block,
        HcclDataType::Fp32,
        ReduceOp::Sum,
    )?;
    let all = up(rt, &vec![0.0; block * n]);
    comm.all_gather(rt, &part.buf, &all.buf, block, HcclDataType::Fp32)?;
    comm.synchronize(rt, "the collectives")?;
    let mut out = down(&t);
    out.extend(down(&all));
    Ok(out)
}

/// The entry point of the child processes; in the test process itself it returns at once.
/// `ACL_SIM_HCCL_CHILD` = `<mode>:<rank>:<ranks>:<folder>`.
#[test]
fn child_rank_entry() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let parts: Vec<&str> = spec.splitn(4, ':').collect();
    let (mode, rank, n, dir) = (
        parts[0],
        parts[1].parse::<u32>().unwrap(),
        parts[2].parse::<u32>().unwrap(),
        PathBuf::from(parts[3]),
    );
    match mode {
        // Joins and runs the collectives, writing its results.
        "collectives" => {
            let (rt, comm) = join(&read_info(&dir.join("root")), n, rank);
            let out = collectives(&rt, &comm).unwrap();
            let bytes: Vec<u8> = out.iter().flat_map(|x| x.to_le_bytes()).collect();
            std::fs::write(dir.join(format!("rank{rank}")), bytes).unwrap();
        }
        // Joins, then its process ends without destroying its communicator (a crash).
        "die" => {
            let (_rt, comm) = join(&read_info(&dir.join("root")), n, rank);
            std::mem::forget(comm);
            std::process::exit(3);
        }
        // Rank 0 in a child: makes the root info, joins, then its process ends.
        "root-dies" => {
            let _rt = sim::runtime_on(0).unwrap();
            let info = root_info(sim::hccl_api(), sim::api()).unwrap();
            write_info(&dir.join("root"), &info);
            let (_rt, comm) = join(&info, n, 0);
            std::mem::forget(comm);
            std::process::exit(3);
        }
        other => panic!("no mode {other}"),
    }
    std::process::exit(0);
}

fn spawn(mode: &str, rank: u32, n: u32, dir: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "hccl_processes::child_rank_entry",
            "--exact",
            "--test-threads=1",
            "--nocapture",
            "-q",
        ])
        .env(CHILD, format!("{mode}:{rank}:{n}:{}", dir.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait(child: Child) -> std::process::Output {
    child.wait_with_output().unwrap()
}

#[test]
fn ranks_in_three_processes_reduce_bit_identically_to_the_rank_order_sum() {
    let tmp = tempfile::tempdir().unwrap();
    let n = 3u32;
    let children: Vec<Child> = (1..n)
        .map(|r| spawn("collectives", r, n, tmp.path()))
        .collect();
    let _rt0 = sim::runtime_on(0).unwrap();
    let info = root_info(sim::hccl_api(), sim::api()).unwrap();
    write_info(&tmp.path().join("root"), &info);
    let (rt, comm) = join(&info, n, 0);
    let mine = collectives(&rt, &comm);
    drop(comm);
    for c in children {
        let out = wait(c);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mine = mine.unwrap();
    // What threads of one process compute: rank 0 + rank 1 + rank 2, in that order.
    let sum: Vec<f32> = (0..LEN)
        .map(|i| (1..n as usize).fold(input(0)[i], |acc, r| acc + input(r)[i]))
        .collect();
    let block = LEN / n as usize;
    let mut want = sum.clone();
    want.extend_from_slice(&sum[..block * n as usize]);
    assert_eq!(mine, want, "rank 0");
    for r in 1..n {
        let b = std::fs::read(tmp.path().join(format!("rank{r}"))).unwrap();
        let got: Vec<f32> = b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        // Bit-exact, on every rank.
        assert_eq!(got, want, "rank {r}");
    }
    // The meeting point (its socket and folder) is gone once every rank joined.
    let id = u64::from_le_bytes(info.internal[16..24].try_into().unwrap());
    let dir = std::env::temp_dir().join(format!("acl-sim-hccl-{}-{id:x}", std::process::id()));
    let deadline = Instant::now() + Duration::from_secs(5);
    while dir.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!dir.exists(), "{} is left", dir.display());
}

#[test]
fn a_rank_whose_process_dies_fails_rank_zero_at_once_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let child = spawn("die", 1, 2, tmp.path());
    let _rt0 = sim::runtime_on(0).unwrap();
    let info = root_info(sim::hccl_api(), sim::api()).unwrap();
    write_info(&tmp.path().join("root"), &info);
    let (rt, comm) = join(&info, 2, 0);
    assert_eq!(wait(child).status.code(), Some(3));
    let started = Instant::now();
    let e = collectives(&rt, &comm).unwrap_err();
    let msg = e.to_string();
    // At once, not after HCCL_EXEC_TIMEOUT (1836 s by default).
    assert!(started.elapsed() < Duration::from_secs(10), "{msg}");
    assert!(
        matches!(e, HcclError::Status { status, .. } if status == HCCL_E_REMOTE),
        "{msg}"
    );
    assert!(msg.contains("rank 1's process was lost"), "{msg}");
}

#[test]
fn a_rank_whose_root_process_dies_fails_at_once_naming_rank_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let child = spawn("root-dies", 0, 2, tmp.path());
    let (rt, comm) = join(&read_info(&tmp.path().join("root")), 2, 1);
    assert_eq!(wait(child).status.code(), Some(3));
    let started = Instant::now();
    let e = collectives(&rt, &comm).unwrap_err();
    let msg = e.to_string();
    assert!(started.elapsed() < Duration::from_secs(10), "{msg}");
    assert!(
        matches!(e, HcclError::Status { status, .. } if status == HCCL_E_REMOTE),
        "{msg}"
    );
    assert!(msg.contains("rank 0's process was lost"), "{msg}");
}
