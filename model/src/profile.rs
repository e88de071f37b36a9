//! What a training step costs the host on an `Ascend` device: launches, synchronisations and
//! host fallbacks per step (the `finetune` counters line), and the `--profile` table of the
//! dispatch per op.

use std::time::{Duration, Instant};

use burn_ascend::backend::profile;
use burn_ascend::backend::{device_counters, fallback_counts, AscendDevice, AscendKind};

/// Launches, synchronisations and host fallbacks of a device so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DispatchCounts {
    /// aclnn launches and queued copies / memsets.
    pub launches: f64,
    /// Waits of the host for the device.
    pub syncs: f64,
    /// Ops run through the host fallback (all ops, all devices).
    pub fallbacks: f64,
    /// Bytes copied host to device.
    pub h2d_bytes: f64,
    /// Bytes copied device to host.
    pub d2h_bytes: f64,
}

impl DispatchCounts {
    /// The counts of `device` now.
    pub fn now(device: &AscendDevice) -> Self {
        let c = device_counters(device);
        Self {
            launches: c.launches as f64,
            syncs: c.synchronizations as f64,
            fallbacks: fallback_counts().values().sum::<u64>() as f64,
            h2d_bytes: c.h2d_bytes as f64,
            d2h_bytes: c.d2h_bytes as f64,
        }
    }

    /// `self − earlier`.
    pub fn since(self, earlier: Self) -> Self {
        Self {
            launches: self.launches - earlier.launches,
            syncs: self.syncs - earlier.syncs,
            fallbacks: self.fallbacks - earlier.fallbacks,
            h2d_bytes: self.h2d_bytes - earlier.h2d_bytes,
            d2h_bytes: self.d2h_bytes - earlier.d2h_bytes,
        }
    }

    /// The mean of `steps` (zero for none).
    pub fn mean(steps: &[Self]) -> Self {
        let n = steps.len().max(1) as f64;
        let sum = steps.iter().fold(Self::default(), |a, s| Self {
            launches: a.launches + s.launches,
            syncs: a.syncs + s.syncs,
            fallbacks: a.fallbacks + s.fallbacks,
            h2d_bytes: a.h2d_bytes + s.h2d_bytes,
            d2h_bytes: a.d2h_bytes + s.d2h_bytes,
        });
        Self {
            launches: sum.launches / n,
            syncs: sum.syncs / n,
            fallbacks: sum.fallbacks / n,
            h2d_bytes: sum.h2d_bytes / n,
            d2h_bytes: sum.d2h_bytes / n,
        }
    }

    /// Host fallbacks by op and bytes copied each way, per step: the details behind [`Self::line`].
    pub fn detail(&self) -> String {
        format!(
            "finetune: per step {:.1} KiB host to device, {:.1} KiB device to host",
            self.h2d_bytes / 1024.0,
            self.d2h_bytes / 1024.0
        )
    }

    /// `finetune: device <launches> launches, <syncs> syncs, <fallbacks> host fallbacks per
    /// step` (means, to one decimal).
    pub fn line(&self) -> String {
        let r = |x: f64| (x * 10.0).round() / 10.0;
        format!(
            "finetune: device {} launches, {} syncs, {} host fallbacks per step",
            r(self.launches),
            r(self.syncs),
            r(self.fallbacks)
        )
    }
}

/// The simulation's time running each task (none on an NPU: CANN reports device time only
/// through its profiler).
fn device_time(device: &AscendDevice) -> Vec<(String, Duration)> {
    #[cfg(feature = "sim")]
    if device.kind == AscendKind::Simulation {
        return profile::sim::device_time()
            .into_iter()
            .map(|(k, _, d)| (k.to_string(), d))
            .collect();
    }
    let _ = device;
    Vec::new()
}

/// When the running profile started (its steps' wall time is measured from here).
static STARTED: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);

/// Starts the dispatch profile (clearing what an earlier one recorded), with the
/// simulation's cost model ([`profile::sim`]) when the `sim` feature is on.
pub fn start_profile() {
    profile::reset();
    #[cfg(feature = "sim")]
    {
        profile::sim::reset_device_time();
        profile::sim::reset_modelled_device_time();
        profile::sim::set_cost_model(true);
    }
    *STARTED.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    profile::set_enabled(true);
}

/// One op's modelled Atlas A2 time over the profiled steps (the simulation's cost model).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelledOp {
    /// aclnn op C name, `aclrtMemcpyAsync` or `aclrtMemsetAsync`.
    pub name: String,
    /// Launches by the host (a graph's replay is one, `aclmdlRIExecuteAsync`).
    pub launches: u64,
    /// Runs of it from a graph's replay (device tasks the replay's one launch queued).
    pub replayed: u64,
    /// Floating-point operations.
    pub flops: f64,
    /// HBM bytes.
    pub bytes: f64,
    /// Roofline seconds.
    pub seconds: f64,
    /// What most of its modelled time is: `memory` (HBM traffic), `compute` (arithmetic)
    /// or `link` (host↔device copies over PCIe).
    pub bound: &'static str,
}

/// A stopped profile: host side per op, the device's time per task where it reports it, and
/// on the simulation the modelled Atlas A2 time per op.
#[derive(Debug, Clone, Default)]
pub struct Profile {
    host: Vec<(String, u64, Duration)>,
    device: Vec<(String, Duration)>,
    sim: bool,
    /// Wall time from [`start_profile`] to [`stop_profile`] (before its final wait).
    wall: Duration,
    modelled: Vec<ModelledOp>,
}

/// The simulation's modelled time per op (empty off the simulation).
fn modelled(device: &AscendDevice) -> Vec<ModelledOp> {
    #[cfg(feature = "sim")]
    {
        profile::sim::set_cost_model(false);
        if device.kind == AscendKind::Simulation {
            return profile::sim::modelled_device_time()
                .into_iter()
                .map(|m| ModelledOp {
                    name: m.name.to_string(),
                    launches: m.launches,
                    replayed: m.replayed,
                    flops: m.flops,
                    bytes: m.bytes,
                    seconds: m.seconds,
                    bound: if m.bytes / profile::sim::atlas_a2::HBM_BYTES_PER_S >= 0.5 * m.seconds {
                        "memory"
                    } else if m.name.starts_with("aclrtMemcpy") {
                        "link"
                    } else {
                        "compute"
                    },
                })
                .collect();
        }
    }
    let _ = device;
    Vec::new()
}

/// Stops the profile after the last profiled step: waits for the work the step queued (so the
/// device's time includes it; this wait is not profiled) and takes the tables.
pub fn stop_profile(device: &AscendDevice) -> Profile {
    profile::set_enabled(false);
    let wall = STARTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .map_or(Duration::ZERO, |t| t.elapsed());
    let modelled = modelled(device);
    burn_ascend::backend::synchronize(device);
    Profile {
        host: profile::snapshot(),
        device: device_time(device),
        sim: device.kind == AscendKind::Simulation,
        wall,
        modelled,
    }
}

/// Per step of a profile: launches, host µs, modelled device µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepModel {
    /// Tasks the host queued (aclnn launches, copies, memsets, graph replays) per step; the
    /// tasks a replay runs are device work, in `device_us`.
    pub launches: f64,
    /// Host µs per step: the profiled wall time less the synchronisations' waits for the
    /// device (what the host itself spends issuing the step).
    pub host_us: f64,
    /// Modelled Atlas A2 µs per step (the sum of the launches' roofline times).
    pub device_us: f64,
}

impl StepModel {
    /// `host / device` (∞ for no modelled time).
    pub fn ratio(&self) -> f64 {
        if self.device_us > 0.0 {
            self.host_us / self.device_us
        } else {
            f64::INFINITY
        }
    }

    /// `<what>: per step <L> launches, host <H> µs, modelled device <D> µs (Atlas A2
    /// roofline), host / device <R>`.
    pub fn line(&self, what: &str) -> String {
        format!(
            "{what}: per step {:.1} launches, host {:.0} µs, modelled device {:.3} µs (Atlas A2 \
             roofline), host / device {:.3}",
            self.launches,
            self.host_us,
            self.device_us,
            self.ratio()
        )
    }
}

/// The per-step figures of a profile over `steps` steps (`None` without a cost model: not
/// the simulation).
pub fn step_model(p: &Profile, steps: usize) -> Option<StepModel> {
    if p.modelled.is_empty() {
        return None;
    }
    let steps = steps.max(1) as f64;
    let waits: Duration = p
        .host
        .iter()
        .filter(|(what, _, _)| what == profile::SYNCHRONIZE_STREAM)
        .map(|e| e.2)
        .sum();
    Some(StepModel {
        launches: p.modelled.iter().map(|m| m.launches as f64).sum::<f64>() / steps,
        host_us: p.wall.saturating_sub(waits).as_secs_f64() * 1e6 / steps,
        device_us: p.modelled.iter().map(|m| m.seconds).sum::<f64>() * 1e6 / steps,
    })
}

/// The top `top` ops by modelled time per step, then the [`StepModel::line`] (empty without
/// a cost model).
pub fn format_modelled(p: &Profile, steps: usize, top: usize, what: &str) -> String {
    let Some(step) = step_model(p, steps) else {
        return String::new();
    };
    let n = steps.max(1) as f64;
    let mut out = format!(
        "{:<48} {:>10} {:>12} {:>10} {:>16} {:>8}\n",
        "modelled device (Atlas A2 roofline)",
        "calls/step",
        "GFLOP/step",
        "MB/step",
        "modelled µs/step",
        "bound"
    );
    for m in p.modelled.iter().take(top) {
        out.push_str(&format!(
            "{:<48} {:>10.1} {:>12.3} {:>10.2} {:>16.2} {:>8}\n",
            m.name,
            (m.launches + m.replayed) as f64 / n,
            m.flops / n / 1e9,
            m.bytes / n / 1e6,
            m.seconds / n * 1e6,
            m.bound,
        ));
    }
    out.push_str(&step.line(what));
    out.push('\n');
    out
}

/// Formats a profile over `steps` steps: per op (aclnn op, queued copy, synchronisation, host
/// fallback) the calls per step, host µs per call, host ms per step and device ms per step (the
/// simulation's kernel time on `sim`; `—` where the device does not report it).
pub fn format_profile(p: &Profile, steps: usize) -> String {
    let steps = steps.max(1) as f64;
    let dev = &p.device;
    let mut out = format!(
        "{:<48} {:>10} {:>12} {:>12} {:>12}\n",
        "op", "calls/step", "host µs/call", "host ms/step", "device ms/step"
    );
    let mut total = (0.0, 0.0);
    for (what, calls, host) in p.host.iter().cloned() {
        // `aclrtMemcpyAsync(host to device)` is the device's `aclrtMemcpyAsync` task.
        let task = what.split('(').next().unwrap_or(&what);
        let device_ms = dev
            .iter()
            .find(|(k, _)| k == task)
            .map(|(_, d)| d.as_secs_f64() * 1e3 / steps);
        total.0 += host.as_secs_f64() * 1e3 / steps;
        total.1 += device_ms.unwrap_or(0.0);
        out.push_str(&format!(
            "{:<48} {:>10.1} {:>12.1} {:>12.2} {:>12}\n",
            what,
            calls as f64 / steps,
            host.as_secs_f64() * 1e6 / calls.max(1) as f64,
            host.as_secs_f64() * 1e3 / steps,
            device_ms.map_or("—".to_string(), |d| format!("{d:.2}")),
        ));
    }
    let device_total = if dev.is_empty() {
        "—".to_string()
    } else {
        format!("{:.2}", total.1)
    };
    out.push_str(&format!(
        "{:<48} {:>10} {:>12} {:>12.2} {:>12}\n",
        "total", "", "", total.0, device_total
    ));
    if p.sim {
        out.push_str(
            "(sim: device ms is the simulation's CPU time running the kernels, not NPU time; \
             the synchronisation's host time is the wait for them)\n",
        );
    }
    out
}

/// Turns the simulated kernels on or off for the launches the calling thread queues
/// (`finetune --dry-run`: off, every launch is still validated, queued and counted, and the
/// cost model still sees its shapes; the data is left unwritten). Nothing off the simulation.
pub fn set_kernels(on: bool) {
    #[cfg(feature = "sim")]
    profile::sim::set_compute(on);
    let _ = on;
}
