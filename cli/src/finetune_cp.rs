//! The refusals of `finetune --cp N` / `--check-cp`, made before the first step (the
//! example calls them; the tests call them without running it).

use crate::args::{ExampleDevice, FinetuneArgs};

impl FinetuneArgs {
    /// What is wrong with the context-parallel flags, one line naming the flag, or `None`.
    /// `launch_world`: the `WORLD_SIZE` of the torchrun-style launch this process is one rank
    /// of (`None`: not launched), which must be N (context parallel) or a multiple N·M (N-way
    /// context parallel in each of M data-parallel groups).
    pub fn cp_refusal(&self, launch_world: Option<usize>) -> Option<String> {
        let n = self.cp;
        if n == 0 {
            return Some("--cp must be at least 1".into());
        }
        if self.check_cp && n < 2 {
            return Some("--check-cp needs --cp N with N >= 2".into());
        }
        if self.check_cp && self.resume {
            return Some(
                "--check-cp compares a fresh run; it cannot be combined with --resume".into(),
            );
        }
        if n == 1 {
            return None;
        }
        if self.check_ddp {
            return Some(format!(
                "--check-ddp does not combine with --cp {n}; use --check-cp (it compares the 2-D run with one device)"
            ));
        }
        if let Some(world) = launch_world.filter(|w| w % n != 0) {
            return Some(format!(
                "--cp {n} cannot split WORLD_SIZE={world} processes into context-parallel groups of {n}: a launch of --cp N needs WORLD_SIZE = N·M (M data-parallel groups of N processes)"
            ));
        }
        // Every rank must hold tokens of every step: with fewer than 2·N² tokens a step of
        // only short sequences (under 2·N tokens each, which are not cut) can number fewer
        // sequences than ranks.
        let need = 2 * n * n;
        if self.batch_tokens < need {
            return Some(format!(
                "--cp {n} cannot split --batch-tokens {} across {n} ranks: it needs at least 2·{n}² = {need} tokens per step so that every rank holds tokens",
                self.batch_tokens
            ));
        }
        if matches!(self.device, ExampleDevice::Cpu) && self.dtype.float_dtype().is_some() {
            return Some(
                "--dtype bf16|f16 needs --device sim|ascend (NdArray computes in f32 only)".into(),
            );
        }
        None
    }

    /// The device indices `first .. first + N·M` of `--cp N` (× `--devices M`), refused
    /// naming `--cp` when `exists` says one of them is not there.
    pub fn cp_devices(
        &self,
        first: u32,
        exists: impl Fn(u32) -> Result<(), String>,
    ) -> Result<Vec<u32>, String> {
        let count = (self.cp * self.devices.max(1)) as u32;
        let ids: Vec<u32> = (0..count).map(|i| first + i).collect();
        for &d in &ids {
            if let Err(e) = exists(d) {
                return Err(format!(
                    "--cp {}{} needs devices {}..{}, but device {d} is not available: {e}",
                    self.cp,
                    if self.devices > 1 {
                        format!(" × --devices {}", self.devices)
                    } else {
                        String::new()
                    },
                    first,
                    first + count
                ));
            }
        }
        Ok(ids)
    }
}
