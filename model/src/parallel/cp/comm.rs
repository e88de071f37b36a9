//! The collectives context parallelism needs, over any backend: [`CpComm`], implemented by
//! [`HostComm`] (ranks as threads of one process, the collectives computed on the host: an
//! all-gather is a concatenation in rank order, a reduction a sum in rank order — the CPU
//! emulation on `NdArray`) and by [`HcclComm`] (one simulated or real Ascend device per rank,
//! `HcclAllGather` / `HcclReduceScatter` / `HcclAllReduce` on the device streams).

use std::sync::{Arc, Condvar, Mutex, PoisonError};

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn_ascend::AttnError;

/// One rank's view of a context-parallel group. Every rank must issue the same collectives
/// in the same order with the same shapes (HCCL's rule).
pub trait CpComm<B: Backend>: Send + Sync + std::fmt::Debug {
    /// This rank.
    fn rank(&self) -> usize;
    /// Ranks in the group.
    fn size(&self) -> usize;
    /// Every rank's `x [m, c]`, stacked in rank order: `[size·m, c]`.
    fn all_gather(&self, x: Tensor<B, 2>) -> Result<Tensor<B, 2>, AttnError>;
    /// Block `rank` (of `size` blocks along the rows) of the rank-order sum of every rank's
    /// `x [size·m, c]`: `[m, c]`.
    fn reduce_scatter_sum(&self, x: Tensor<B, 2>) -> Result<Tensor<B, 2>, AttnError>;
    /// The rank-order sum of every rank's `x`.
    fn all_reduce_sum(&self, x: Tensor<B, 1>) -> Result<Tensor<B, 1>, AttnError>;
    /// This rank is gone (its thread failed): the other ranks' pending and later collectives
    /// fail instead of waiting for it.
    fn leave(&self);
}

#[derive(Default)]
struct Round {
    /// Each rank's deposit for the current round.
    slots: Vec<Option<Vec<f32>>>,
    /// The current round's deposits once all arrived.
    done: Option<Arc<Vec<Vec<f32>>>>,
    /// Ranks that took the current round's result.
    taken: usize,
    /// A rank that left (its thread ended) before the group finished: every wait fails.
    left: Option<usize>,
}

/// The shared state of a [`HostComm`] group.
struct HostGroup {
    size: usize,
    round: Mutex<Round>,
    changed: Condvar,
}

/// A rank of an in-process group whose collectives run on the host, in rank order: the
/// single-process emulation of context parallelism (any backend; values pass through f32).
#[derive(Clone)]
pub struct HostComm {
    group: Arc<HostGroup>,
    rank: usize,
}

impl std::fmt::Debug for HostComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostComm(rank {} of {})", self.rank, self.group.size)
    }
}

impl HostComm {
    /// One communicator per rank of a group of `size`.
    pub fn group(size: usize) -> Vec<Self> {
        let group = Arc::new(HostGroup {
            size,
            round: Mutex::new(Round {
                slots: vec![None; size],
                ..Round::default()
            }),
            changed: Condvar::new(),
        });
        (0..size)
            .map(|rank| Self {
                group: group.clone(),
                rank,
            })
            .collect()
    }

    /// Marks this rank as gone (its thread failed or ended early): the other ranks' pending
    /// and later collectives fail instead of waiting for it.
    pub fn leave(&self) {
        let mut st = self
            .group
            .round
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        st.left.get_or_insert(self.rank);
        self.group.changed.notify_all();
    }

    /// Deposits `data` and returns every rank's deposit of this round, in rank order.
    fn exchange(&self, data: Vec<f32>, call: &str) -> Result<Arc<Vec<Vec<f32>>>, AttnError> {
        let g = &self.group;
        let gone = |r: usize| AttnError::Device {
            op: "context-parallel".into(),
            call: call.into(),
            status: None,
            message: format!(
                "rank {r} left the group before rank {} got there",
                self.rank
            ),
        };
        let mut st = g.round.lock().unwrap_or_else(PoisonError::into_inner);
        // The previous round's result must be taken by every rank before a new one starts.
        while st.done.is_some() {
            if let Some(r) = st.left {
                return Err(gone(r));
            }
            st = g.changed.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        st.slots[self.rank] = Some(data);
        if st.slots.iter().all(Option::is_some) {
            let all = st
                .slots
                .iter_mut()
                .map(|s| s.take().expect("all"))
                .collect();
            st.done = Some(Arc::new(all));
            st.taken = 0;
            g.changed.notify_all();
        }
        loop {
            if let Some(done) = st.done.clone() {
                st.taken += 1;
                if st.taken == g.size {
                    st.done = None;
                    g.changed.notify_all();
                }
                return Ok(done);
            }
            if let Some(r) = st.left {
                return Err(gone(r));
            }
            st = g.changed.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

fn host<B: Backend, const D: usize>(x: &Tensor<B, D>) -> Vec<f32> {
    x.to_data()
        .convert::<f32>()
        .into_vec::<f32>()
        .expect("f32 after convert")
}

fn back<B: Backend, const D: usize>(
    v: Vec<f32>,
    shape: [usize; D],
    like: &Tensor<B, D>,
) -> Tensor<B, D> {
    Tensor::<B, D>::from_data(TensorData::new(v, shape), &like.device()).cast(like.dtype())
}

impl<B: Backend> CpComm<B> for HostComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.group.size
    }

    fn all_gather(&self, x: Tensor<B, 2>) -> Result<Tensor<B, 2>, AttnError> {
        let [m, c] = x.dims();
        let all = self.exchange(host(&x), "all-gather")?;
        Ok(back(all.concat(), [self.group.size * m, c], &x))
    }

    fn reduce_scatter_sum(&self, x: Tensor<B, 2>) -> Result<Tensor<B, 2>, AttnError> {
        let [rows, c] = x.dims();
        let n = self.group.size;
        let m = rows / n;
        let all = self.exchange(host(&x), "reduce-scatter")?;
        let block = self.rank * m * c..(self.rank + 1) * m * c;
        let mut out = all[0][block.clone()].to_vec();
        for part in &all[1..] {
            for (o, v) in out.iter_mut().zip(&part[block.clone()]) {
                *o += v;
            }
        }
        Ok(back(out, [m, c], &x))
    }

    fn all_reduce_sum(&self, x: Tensor<B, 1>) -> Result<Tensor<B, 1>, AttnError> {
        let [len] = x.dims();
        let all = self.exchange(host(&x), "all-reduce")?;
        let mut out = all[0].clone();
        for part in &all[1..] {
            for (o, v) in out.iter_mut().zip(part) {
                *o += v;
            }
        }
        Ok(back(out, [len], &x))
    }

    fn leave(&self) {
        HostComm::leave(self);
    }
}

/// A rank of an HCCL group on its Ascend device (simulated or real): the collectives are
/// queued on the device stream.
#[derive(Debug)]
pub struct HcclComm {
    /// `None` once the rank left (its communicator destroyed, so peers fail with
    /// `HCCL_E_REMOTE` instead of waiting).
    group: Mutex<Option<burn_ascend::backend::collective::ProcessGroup>>,
    rank: usize,
    size: usize,
}

impl HcclComm {
    /// Wraps one rank's process group.
    pub fn new(group: burn_ascend::backend::collective::ProcessGroup) -> Self {
        let (rank, size) = (group.rank(), group.size());
        Self {
            group: Mutex::new(Some(group)),
            rank,
            size,
        }
    }
}

fn hccl(e: burn_ascend::backend::HcclError) -> AttnError {
    let call = match &e {
        burn_ascend::backend::HcclError::Status { call, .. } => call.clone(),
        _ => "HCCL".into(),
    };
    AttnError::Device {
        op: "context-parallel".into(),
        call,
        status: e.status(),
        message: e.to_string(),
    }
}

type Asc = burn_ascend::backend::Ascend;

impl HcclComm {
    fn run<const D: usize, const E: usize>(
        &self,
        x: Tensor<Asc, D>,
        f: impl FnOnce(
            &burn_ascend::backend::collective::ProcessGroup,
            burn_ascend::backend::AscendTensor,
        )
            -> Result<burn_ascend::backend::AscendTensor, burn_ascend::backend::HcclError>,
    ) -> Result<Tensor<Asc, E>, AttnError> {
        use burn::tensor::TensorPrimitive;
        let g = self.group.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(g) = g.as_ref() else {
            return Err(AttnError::Device {
                op: "context-parallel".into(),
                call: "HCCL".into(),
                status: None,
                message: format!("rank {} left its group", self.rank),
            });
        };
        let out = f(g, x.into_primitive().tensor()).map_err(hccl)?;
        Ok(Tensor::from_primitive(TensorPrimitive::Float(out)))
    }
}

impl CpComm<Asc> for HcclComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_gather(&self, x: Tensor<Asc, 2>) -> Result<Tensor<Asc, 2>, AttnError> {
        self.run(x, |g, t| g.all_gather(t))
    }

    fn reduce_scatter_sum(&self, x: Tensor<Asc, 2>) -> Result<Tensor<Asc, 2>, AttnError> {
        self.run(x, |g, t| g.reduce_scatter_sum(t))
    }

    fn all_reduce_sum(&self, x: Tensor<Asc, 1>) -> Result<Tensor<Asc, 1>, AttnError> {
        self.run(x, |g, t| g.all_reduce_sum(t))
    }

    fn leave(&self) {
        // Destroys the communicator (after its queued collectives ran).
        drop(
            self.group
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    #[test]
    fn host_collectives_are_rank_order_concatenations_and_sums_and_a_rank_that_left_fails_the_others(
    ) {
        let comms = HostComm::group(2);
        let out = std::thread::scope(|s| {
            let hs: Vec<_> = comms
                .iter()
                .map(|c| {
                    s.spawn(move || {
                        let r = CpComm::<NdArray>::rank(c) as f32;
                        let x = Tensor::<NdArray, 2>::from_data(
                            TensorData::new(vec![r, r + 0.5, 10.0 + r, 1e8 * (1.0 - r)], [2, 2]),
                            &Default::default(),
                        );
                        let g = c.all_gather(x.clone()).unwrap().into_data().to_vec::<f32>();
                        let rs = c.reduce_scatter_sum(x).unwrap().into_data().to_vec::<f32>();
                        (g.unwrap(), rs.unwrap())
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        let gathered = vec![0.0, 0.5, 10.0, 1e8, 1.0, 1.5, 11.0, 0.0];
        assert_eq!(out[0].0, gathered);
        assert_eq!(out[1].0, gathered);
        // Rank 0 gets block 0 summed (rank 0 + rank 1), rank 1 block 1.
        assert_eq!(out[0].1, vec![1.0, 2.0]);
        assert_eq!(out[1].1, vec![21.0, 1e8]);
        comms[1].leave();
        let x = Tensor::<NdArray, 1>::zeros([3], &Default::default());
        let e = comms[0].all_reduce_sum(x).unwrap_err().to_string();
        assert!(
            e.contains("rank 1 left the group before rank 0 got there"),
            "{e}"
        );
    }
}
