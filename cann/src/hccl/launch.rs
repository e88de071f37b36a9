//! One process per NPU, launched as torchrun / torch_npu launch them: the rank and world size
//! from `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT` ([`LaunchEnv`]), and
//! the exchange of rank 0's `HcclRootInfo` over a tiny TCP rendezvous
//! ([`exchange_root_info`]) before every rank calls `HcclCommInitRootInfo`.
//!
//! The rendezvous: rank 0 listens on `MASTER_PORT` (every interface); each other rank connects
//! to `MASTER_ADDR:MASTER_PORT` (retrying until the deadline: rank 0 may start later), sends a
//! 12-byte hello (magic `BAHC`, its rank, the world size, little-endian `u32`s) and reads a
//! status byte, then the 4108 root-info bytes (status 0) or a refusal (status 1: a `u32` length
//! and the message). Rank 0 refuses a duplicate or out-of-range `RANK` or a different
//! `WORLD_SIZE`, naming the variable, both in its own error and in the peer's. The deadline is `HCCL_CONNECT_TIMEOUT` (seconds, HCCL's own variable for
//! its link setup; default 120, HCCL's default).
//!
//! Under `torchrun` the agent's own store may already listen on `MASTER_PORT`
//! (`TORCHELASTIC_USE_AGENT_STORE=True`): the rendezvous then uses `MASTER_PORT + 1`, so that
//! torchrun works unchanged. `BURN_ASCEND_RENDEZVOUS_PORT` overrides both.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::error::HcclError;
use super::ffi::{HcclRootInfo, HCCL_ROOT_INFO_BYTES};

/// HCCL's default `HCCL_CONNECT_TIMEOUT` (seconds).
pub const DEFAULT_CONNECT_TIMEOUT_S: u64 = 120;
/// HCCL's default `HCCL_EXEC_TIMEOUT` (seconds).
pub const DEFAULT_EXEC_TIMEOUT_S: u64 = 1836;

const MAGIC: &[u8; 4] = b"BAHC";

/// A torchrun-style launch: this process's rank among `world_size`, its device
/// (`local_rank`) and where rank 0 listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchEnv {
    /// `RANK`: this process's rank, `0..world_size`.
    pub rank: u32,
    /// `WORLD_SIZE`: the number of processes (one per NPU).
    pub world_size: u32,
    /// `LOCAL_RANK`: the rank on this node, used as the device index (default: `RANK`).
    pub local_rank: u32,
    /// `MASTER_ADDR`: rank 0's host.
    pub master_addr: String,
    /// `MASTER_PORT` (or `BURN_ASCEND_RENDEZVOUS_PORT`): rank 0's rendezvous port.
    pub master_port: u16,
}

impl LaunchEnv {
    /// Reads the process environment; `Ok(None)` when `WORLD_SIZE` is unset (not launched
    /// as one rank of several).
    pub fn from_env() -> Result<Option<Self>, HcclError> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// As [`Self::from_env`] over any variable lookup (for tests).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, HcclError> {
        let Some(ws) = get("WORLD_SIZE") else {
            return Ok(None);
        };
        let num = |name: &str, v: &str| -> Result<u32, HcclError> {
            v.trim().parse::<u32>().map_err(|_| {
                HcclError::invalid(name, format!("must be a non-negative integer, got {v:?}"))
            })
        };
        let world_size = num("WORLD_SIZE", &ws)?;
        if world_size == 0 {
            return Err(HcclError::invalid(
                "WORLD_SIZE",
                "must be at least 1, got 0",
            ));
        }
        let rank = num(
            "RANK",
            &get("RANK")
                .ok_or_else(|| HcclError::invalid("RANK", "unset while WORLD_SIZE is set"))?,
        )?;
        if rank >= world_size {
            return Err(HcclError::invalid(
                "RANK",
                format!("must be below WORLD_SIZE {world_size}, got {rank}"),
            ));
        }
        let local_rank = match get("LOCAL_RANK") {
            Some(v) => num("LOCAL_RANK", &v)?,
            None => rank,
        };
        let master_addr = get("MASTER_ADDR")
            .filter(|a| !a.trim().is_empty())
            .ok_or_else(|| HcclError::invalid("MASTER_ADDR", "unset while WORLD_SIZE is set"))?;
        let (port_var, port) = match get("BURN_ASCEND_RENDEZVOUS_PORT") {
            Some(p) => ("BURN_ASCEND_RENDEZVOUS_PORT", p),
            None => (
                "MASTER_PORT",
                get("MASTER_PORT").ok_or_else(|| {
                    HcclError::invalid("MASTER_PORT", "unset while WORLD_SIZE is set")
                })?,
            ),
        };
        let mut master_port = port
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| {
                HcclError::invalid(
                    port_var,
                    format!("must be a port in 1..=65535, got {port:?}"),
                )
            })?;
        let agent_store = get("TORCHELASTIC_USE_AGENT_STORE")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        if port_var == "MASTER_PORT" && agent_store {
            // torchrun's agent holds MASTER_PORT with its own store: the next one is ours.
            master_port = master_port.checked_add(1).ok_or_else(|| {
                HcclError::invalid(
                    "MASTER_PORT",
                    "65535 under torchrun's agent store leaves no port after it for the rendezvous (set BURN_ASCEND_RENDEZVOUS_PORT)",
                )
            })?;
        }
        Ok(Some(Self {
            rank,
            world_size,
            local_rank,
            master_addr: master_addr.trim().to_string(),
            master_port,
        }))
    }
}

fn timeout_var(name: &str, default_s: u64) -> Result<Duration, HcclError> {
    match std::env::var(name) {
        Err(_) => Ok(Duration::from_secs(default_s)),
        Ok(v) => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|&s| s > 0)
            .map(Duration::from_secs)
            .ok_or_else(|| {
                HcclError::invalid(
                    name,
                    format!("must be a positive number of seconds, got {v:?}"),
                )
            }),
    }
}

/// `HCCL_CONNECT_TIMEOUT`: how long communicator setup (and this rendezvous) may wait for the
/// other ranks (default 120 s).
pub fn connect_timeout() -> Result<Duration, HcclError> {
    timeout_var("HCCL_CONNECT_TIMEOUT", DEFAULT_CONNECT_TIMEOUT_S)
}

/// `HCCL_EXEC_TIMEOUT`: how long a queued collective may wait for the other ranks before the
/// device reports a timeout (default 1836 s).
pub fn exec_timeout() -> Result<Duration, HcclError> {
    timeout_var("HCCL_EXEC_TIMEOUT", DEFAULT_EXEC_TIMEOUT_S)
}

fn rv(e: impl std::fmt::Display, what: &str) -> HcclError {
    HcclError::Rendezvous(format!("{what}: {e}"))
}

/// Shares rank 0's root info with every rank: rank 0 passes `Some(info)` and serves it to the
/// `world_size - 1` others, which pass `None` and receive it. Everyone gets the same bytes back,
/// or a typed error within `timeout`.
pub fn exchange_root_info(
    env: &LaunchEnv,
    root: Option<&HcclRootInfo>,
    timeout: Duration,
) -> Result<HcclRootInfo, HcclError> {
    match (env.rank, root) {
        (0, Some(info)) => {
            let listener =
                TcpListener::bind((Ipv4Addr::UNSPECIFIED, env.master_port)).map_err(|e| {
                    rv(
                        e,
                        &format!("rank 0 cannot listen on port {}", env.master_port),
                    )
                })?;
            serve(&listener, env.world_size, info, timeout)?;
            Ok(info.clone())
        }
        (0, None) => Err(HcclError::invalid(
            "root",
            "rank 0 must pass the root info it got from HcclGetRootInfo",
        )),
        (r, Some(_)) => Err(HcclError::invalid(
            "root",
            format!("only rank 0 serves the root info; rank {r} receives it"),
        )),
        (_, None) => fetch(env, timeout),
    }
}

/// Rank 0's side over an already bound listener (tests bind port 0 and read the port back).
pub fn serve(
    listener: &TcpListener,
    world_size: u32,
    info: &HcclRootInfo,
    timeout: Duration,
) -> Result<(), HcclError> {
    let deadline = Instant::now() + timeout;
    listener
        .set_nonblocking(true)
        .map_err(|e| rv(e, "listener"))?;
    let mut joined = vec![false; world_size as usize];
    joined[0] = true;
    while joined.iter().any(|j| !j) {
        let (mut s, peer) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<String> = joined
                        .iter()
                        .enumerate()
                        .filter(|(_, j)| !**j)
                        .map(|(r, _)| r.to_string())
                        .collect();
                    return Err(HcclError::Rendezvous(format!(
                        "rank 0 waited {:?} (HCCL_CONNECT_TIMEOUT) and rank(s) {} never connected",
                        timeout,
                        missing.join(", ")
                    )));
                }
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) => return Err(rv(e, "accept")),
        };
        s.set_nonblocking(false).map_err(|e| rv(e, "socket"))?;
        s.set_read_timeout(Some(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
        ))
        .map_err(|e| rv(e, "socket"))?;
        let mut hello = [0u8; 12];
        s.read_exact(&mut hello)
            .map_err(|e| rv(e, &format!("reading the hello of {peer}")))?;
        if &hello[..4] != MAGIC {
            return Err(HcclError::Rendezvous(format!(
                "{peer} is not a burn-ascend rank (bad hello)"
            )));
        }
        let rank = u32::from_le_bytes(hello[4..8].try_into().expect("4 bytes"));
        let ws = u32::from_le_bytes(hello[8..12].try_into().expect("4 bytes"));
        let refusal = if ws != world_size {
            Some(HcclError::invalid(
                "WORLD_SIZE",
                format!(
                    "rank {rank} ({peer}) has WORLD_SIZE {ws}, rank 0 has {world_size} (every process of the job must have the same)"
                ),
            ))
        } else if rank == 0 || (rank < world_size && joined[rank as usize]) {
            Some(HcclError::invalid(
                "RANK",
                format!(
                    "two processes have RANK {rank} (the second is {peer}; WORLD_SIZE {world_size})"
                ),
            ))
        } else if rank >= world_size {
            Some(HcclError::invalid(
                "RANK",
                format!("{peer} has RANK {rank}, not below WORLD_SIZE {world_size}"),
            ))
        } else {
            None
        };
        if let Some(e) = refusal {
            // The peer learns why, then rank 0 fails too: the job cannot form.
            let msg = e.to_string();
            let mut out = vec![1u8];
            out.extend_from_slice(&(msg.len() as u32).to_le_bytes());
            out.extend_from_slice(msg.as_bytes());
            let _ = s.write_all(&out);
            return Err(e);
        }
        s.write_all(&[0u8])
            .map_err(|e| rv(e, &format!("answering rank {rank}")))?;
        s.write_all(&info.internal)
            .map_err(|e| rv(e, &format!("sending the root info to rank {rank}")))?;
        joined[rank as usize] = true;
    }
    Ok(())
}

fn fetch(env: &LaunchEnv, timeout: Duration) -> Result<HcclRootInfo, HcclError> {
    let deadline = Instant::now() + timeout;
    let addr = format!("{}:{}", env.master_addr, env.master_port);
    let mut last = String::from("no address");
    loop {
        let addrs: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map(|a| a.collect())
            .unwrap_or_default();
        for a in &addrs {
            match TcpStream::connect_timeout(a, Duration::from_secs(1)) {
                Ok(mut s) => {
                    s.set_read_timeout(Some(
                        deadline
                            .saturating_duration_since(Instant::now())
                            .max(Duration::from_millis(1)),
                    ))
                    .map_err(|e| rv(e, "socket"))?;
                    let mut hello = Vec::with_capacity(12);
                    hello.extend_from_slice(MAGIC);
                    hello.extend_from_slice(&env.rank.to_le_bytes());
                    hello.extend_from_slice(&env.world_size.to_le_bytes());
                    s.write_all(&hello)
                        .map_err(|e| rv(e, "sending the hello"))?;
                    let mut status = [0u8; 1];
                    s.read_exact(&mut status).map_err(|e| {
                        rv(
                            e,
                            &format!("rank {} reading rank 0's answer from {addr}", env.rank),
                        )
                    })?;
                    if status[0] != 0 {
                        return Err(refused_by_rank_zero(&mut s));
                    }
                    let mut info = HcclRootInfo::default();
                    s.read_exact(&mut info.internal[..HCCL_ROOT_INFO_BYTES])
                        .map_err(|e| {
                            rv(
                                e,
                                &format!("rank {} reading the root info from {addr}", env.rank),
                            )
                        })?;
                    return Ok(info);
                }
                Err(e) => last = e.to_string(),
            }
        }
        if Instant::now() >= deadline {
            return Err(HcclError::Rendezvous(format!(
                "rank {} could not reach rank 0 at {addr} within {:?} (HCCL_CONNECT_TIMEOUT): {last}",
                env.rank, timeout
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Rank 0's refusal of this process, as this process's error (it names the variable).
fn refused_by_rank_zero(s: &mut TcpStream) -> HcclError {
    let mut len = [0u8; 4];
    let mut msg = Vec::new();
    if s.read_exact(&mut len).is_ok() {
        msg = vec![0u8; u32::from_le_bytes(len).min(4096) as usize];
        let _ = s.read_exact(&mut msg);
    }
    HcclError::Rendezvous(format!(
        "rank 0 refused this process: {}",
        String::from_utf8_lossy(&msg)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Rank `rank` of a launch of `world` ranks on this host (local rank = rank), rank 0
    /// listening at `port`.
    fn local_env(rank: u32, world: u32, port: u16) -> LaunchEnv {
        LaunchEnv {
            rank,
            world_size: world,
            local_rank: rank,
            master_addr: "127.0.0.1".into(),
            master_port: port,
        }
    }

    fn vars(kv: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = kv
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn torchrun_variables_give_the_rank_world_size_device_and_rendezvous_address() {
        let env = LaunchEnv::from_vars(vars(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "10.0.0.2"),
            ("MASTER_PORT", "29500"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            env,
            LaunchEnv {
                rank: 3,
                world_size: 8,
                local_rank: 1,
                master_addr: "10.0.0.2".into(),
                master_port: 29500
            }
        );
        assert_eq!(LaunchEnv::from_vars(vars(&[])).unwrap(), None);
        // Under torchrun's agent store, MASTER_PORT is the store's: the rendezvous takes the
        // next port, unless BURN_ASCEND_RENDEZVOUS_PORT names one.
        let torchrun = [
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
        ];
        let env = LaunchEnv::from_vars(vars(&torchrun)).unwrap().unwrap();
        assert_eq!(env.master_port, 29501);
        let mut chosen = torchrun.to_vec();
        chosen.push(("BURN_ASCEND_RENDEZVOUS_PORT", "31000"));
        let env = LaunchEnv::from_vars(vars(&chosen)).unwrap().unwrap();
        assert_eq!(env.master_port, 31000);
    }

    #[test]
    fn bad_launch_variables_are_refused_naming_the_variable() {
        let base = [
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "localhost"),
            ("MASTER_PORT", "29500"),
        ];
        let with = |k: &str, v: &str| {
            let mut kv: Vec<(&str, &str)> = base.iter().copied().filter(|(n, _)| *n != k).collect();
            let owned = (k.to_string(), v.to_string());
            let leaked: &'static (String, String) = Box::leak(Box::new(owned));
            kv.push((leaked.0.as_str(), leaked.1.as_str()));
            LaunchEnv::from_vars(vars(&kv)).unwrap_err().to_string()
        };
        assert!(with("RANK", "2").contains("invalid RANK: must be below WORLD_SIZE 2"));
        assert!(with("WORLD_SIZE", "0").contains("invalid WORLD_SIZE"));
        assert!(with("WORLD_SIZE", "two").contains("invalid WORLD_SIZE"));
        assert!(with("MASTER_PORT", "0").contains("invalid MASTER_PORT"));
        assert!(with("MASTER_PORT", "70000").contains("invalid MASTER_PORT"));
        let no_addr = LaunchEnv::from_vars(vars(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_PORT", "1"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(no_addr.contains("invalid MASTER_ADDR"), "{no_addr}");
    }

    fn info(seed: u8) -> HcclRootInfo {
        let mut i = HcclRootInfo::default();
        for (k, b) in i.internal.iter_mut().enumerate() {
            *b = seed.wrapping_add(k as u8);
        }
        i
    }

    #[test]
    fn every_rank_receives_rank_zeros_root_info_over_loopback() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let root = info(7);
        let world = 4u32;
        let clients: Vec<_> = (1..world)
            .map(|rank| {
                std::thread::spawn(move || {
                    let env = local_env(rank, world, port);
                    exchange_root_info(&env, None, Duration::from_secs(20)).unwrap()
                })
            })
            .collect();
        serve(&listener, world, &root, Duration::from_secs(20)).unwrap();
        for c in clients {
            assert_eq!(c.join().unwrap().internal, root.internal);
        }
    }

    #[test]
    fn a_missing_rank_ends_the_rendezvous_with_a_timeout_naming_it() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let err = serve(&listener, 2, &info(1), Duration::from_millis(200)).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("rank(s) 1 never connected"), "{msg}");
        // A rank whose rank 0 never comes up gives up too, naming the address.
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let env = local_env(1, 2, port);
        let msg = exchange_root_info(&env, None, Duration::from_millis(200))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("could not reach rank 0 at 127.0.0.1:"),
            "{msg}"
        );
    }

    #[test]
    fn a_rank_with_another_world_size_is_refused_by_rank_zero() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let c = std::thread::spawn(move || {
            let env = local_env(1, 3, port);
            exchange_root_info(&env, None, Duration::from_secs(5))
        });
        let msg = serve(&listener, 2, &info(2), Duration::from_secs(5))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("invalid WORLD_SIZE: rank 1") && msg.contains("WORLD_SIZE 3"),
            "{msg}"
        );
        // The peer is told why, naming the variable.
        let peer = c.join().unwrap().unwrap_err().to_string();
        assert!(
            peer.contains("rank 0 refused this process: invalid WORLD_SIZE"),
            "{peer}"
        );
    }

    #[test]
    fn two_processes_with_one_rank_are_refused_naming_rank() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let clients: Vec<_> = (0..2)
            .map(|_| {
                std::thread::spawn(move || {
                    let env = local_env(1, 3, port);
                    exchange_root_info(&env, None, Duration::from_secs(5))
                })
            })
            .collect();
        let msg = serve(&listener, 3, &info(3), Duration::from_secs(5))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("invalid RANK: two processes have RANK 1"),
            "{msg}"
        );
        let results: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
        // The first to arrive got the root info, the second was told why it was refused.
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
        let refused = results
            .into_iter()
            .find_map(Result::err)
            .unwrap()
            .to_string();
        assert!(
            refused.contains("invalid RANK: two processes have RANK 1"),
            "{refused}"
        );
    }
}
