//! The dispatch figures of `burn-ascend bench`: what one native op costs the host on the
//! `Ascend` backend, and how many launches a training step of the `finetune` model makes.
//! Both run on the host simulation of the ACL ABI with its kernels switched off
//! (`burn_ascend_acl_sim::set_compute(false)`: launches are validated, queued and consumed
//! but write nothing), so what is timed is the host side of dispatch alone.
//!
//! - `host_us_per_launch`: host time of `float_add` on two 256-element f32 tensors divided by
//!   the launches it made (one per add): the output's allocation from the caching pool, three
//!   `aclTensor` descriptors, both aclnn stages and the queueing, with no wait for the device.
//!   Best of five batches of launches (the quietest moment of a shared machine).
//! - `launches_per_step`, `syncs_per_step`, `fallbacks_per_step`: the counters of the second
//!   training step (the first also initialises the optimizer's state) of
//!   `ModelConfig::small_byte_model()` on its default 1024-token packed batch, the same step
//!   `finetune --device sim` runs.

use std::time::Instant;

use super::CliError;

/// The dispatch figures, or `None` without the simulation (the `sim` feature); serialised as
/// the bench JSON's `dispatch` object, under these names.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Dispatch {
    /// Host µs per native launch, compute excluded.
    pub host_us_per_launch: f64,
    /// Launches (aclnn ops and queued copies) of one training step.
    pub launches_per_step: f64,
    /// Host waits for the device in one training step.
    pub syncs_per_step: f64,
    /// Host fallbacks in one training step.
    pub fallbacks_per_step: f64,
}

/// Measures the dispatch figures with `launches` adds per batch.
#[cfg(feature = "sim")]
pub fn measure(launches: usize) -> Result<Dispatch, CliError> {
    use burn::tensor::backend::Backend;
    use burn::tensor::{Tensor, TensorData};

    use burn_ascend::backend::{device_counters, Ascend, AscendDevice};
    use burn_ascend_model::profile::DispatchCounts;

    let device = AscendDevice::sim();
    burn_ascend::backend::is_available(&device).map_err(CliError::Io)?;
    // Off for the launches this thread queues (the setting is per thread and per task).
    burn_ascend_acl_sim::set_compute(false);
    let result = (|| {
        let a = Tensor::<Ascend, 1>::from_data(TensorData::new(vec![1.0f32; 256], [256]), &device);
        let b = a.clone();
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let before = device_counters(&device).launches;
            let t = Instant::now();
            for _ in 0..launches {
                // Each result is dropped at once: its block goes back to the pool, as an
                // activation's does in a step.
                drop(a.clone() + b.clone());
            }
            let host = t.elapsed().as_secs_f64();
            let n = device_counters(&device).launches - before;
            Ascend::sync(&device).map_err(|e| CliError::Io(format!("sync: {e}")))?;
            best = best.min(host * 1e6 / n.max(1) as f64);
        }
        let step = training_step_counts(&device)?;
        Ok(Dispatch {
            host_us_per_launch: best,
            launches_per_step: step.launches,
            syncs_per_step: step.syncs,
            fallbacks_per_step: step.fallbacks,
        })
    })();
    burn_ascend_acl_sim::set_compute(true);
    return result;

    /// The counters of the second of two training steps of the default `finetune` model.
    fn training_step_counts(device: &AscendDevice) -> Result<DispatchCounts, CliError> {
        use burn::backend::Autodiff;

        use burn_ascend_model::load::data::{documents_from_text, BUNDLED_CORPUS};
        use burn_ascend_model::train::{init_model, train, Init, TrainOptions};
        use burn_ascend_model::{ModelConfig, Packer, Tokenizer};

        type B = Autodiff<Ascend>;
        // `train` writes its final checkpoint here; removed afterwards.
        let dir = std::env::temp_dir().join(format!("burn-ascend-bench-{}", std::process::id()));
        let err = |e: burn_ascend::AttnError| CliError::Io(e.to_string());
        let init = Init::Fresh(ModelConfig::small_byte_model());
        let (model, state) = init_model::<B>(&init, &dir, device).map_err(err)?;
        let docs = documents_from_text(BUNDLED_CORPUS);
        let mut packer = Packer::new(&docs, &Tokenizer::Bytes, 1024, 256, 42).map_err(err)?;
        let opts = TrainOptions {
            warmup_steps: None,
            total_steps: 2,
            stop_after: None,
            lr: 1e-3,
            weight_decay: 0.1,
            clip_norm: 1.0,
            seed: 42,
            out: dir.clone(),
            save_every: usize::MAX,
        };
        let mut last = DispatchCounts::now(device);
        let mut second = DispatchCounts::default();
        let trained = train(model, state, false, &mut packer, &opts, |r| {
            let now = DispatchCounts::now(device);
            if r.step == 1 {
                second = now.since(last);
            }
            last = now;
        });
        let _ = std::fs::remove_dir_all(&dir);
        trained.map_err(err)?;
        Ok(second)
    }
}

/// Without the simulation there is nothing to measure the host side on.
#[cfg(not(feature = "sim"))]
pub fn measure(_launches: usize) -> Result<Dispatch, CliError> {
    Err(CliError::Io(
        "the dispatch figures need the host simulation (feature `sim`)".into(),
    ))
}
