//! A run's progress as `state.json` holds it: the steps done, the loss curve and the rank
//! count, written with every published checkpoint and read back by `--resume`.

use std::path::Path;

use burn_ascend::AttnError;

/// The loss curve of the whole run (resumed steps first); `state.json` under these names.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrainState {
    /// Steps done.
    pub step: usize,
    /// Per-step losses.
    pub losses: Vec<f32>,
    /// Data-parallel ranks the run trained on (0 or 1: one device), which is the batches of the
    /// stream each step takes; `--resume` needs the same, except under ZeRO (a ZeRO run resumed
    /// on a divisor of it keeps it: each rank takes several batches). Absent from the files of
    /// runs older than data parallelism: one device.
    #[serde(default = "one_device")]
    pub devices: usize,
}

fn one_device() -> usize {
    1
}

impl TrainState {
    /// `state.json`'s bytes. A NaN loss would be written as `null`, which [`TrainState::load`]
    /// refuses; training stops before saving one.
    pub(crate) fn to_json(&self) -> Result<Vec<u8>, AttnError> {
        let state = Self {
            devices: self.devices.max(1),
            ..self.clone()
        };
        serde_json::to_vec(&state).map_err(|e| io(Path::new("state.json"), e))
    }

    /// Reads `state.json` from `dir`; a file of another shape (`[]`, a missing key, a loss
    /// that is not a number) is refused with its path, never taken for a fresh run.
    pub fn load(dir: &Path) -> Result<Self, AttnError> {
        let path = dir.join("state.json");
        let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
        Self::from_json(&bytes, &path)
    }

    /// Parses the bytes of `state.json` (read from `path`, named in errors).
    pub fn from_json(bytes: &[u8], path: &Path) -> Result<Self, AttnError> {
        let state: Self = serde_json::from_slice(bytes).map_err(|e| io(path, e))?;
        if state.losses.len() != state.step {
            return Err(io(path, "step and loss count disagree"));
        }
        Ok(state)
    }
}

fn io(path: &Path, e: impl std::fmt::Display) -> AttnError {
    AttnError::invalid("checkpoint", format!("{}: {e}", path.display()))
}
