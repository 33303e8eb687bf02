//! Sums over the ranks of a tensor-parallel group (`model/tensor_parallel.rs`): NCCL across CUDA
//! devices (`nccl.rs`), host memory across CPU ranks.

use candle_core::{Device, Tensor};
use std::sync::{Arc, Condvar, Mutex};

/// Sums a tensor over the ranks of a group, every rank receiving the same result. Each rank
/// holds its own handle; all ranks must call [`AllReduce::sum`] in the same order.
pub trait AllReduce: Send + Sync {
    fn sum(&self, x: &Tensor) -> candle_core::Result<Tensor>;

    /// Releases every rank waiting in [`AllReduce::sum`] with an error: a rank that failed
    /// will not arrive, and its peers must not wait for it forever.
    fn abort(&self);
}

/// An all-reduce through host memory, for ranks on devices NCCL does not serve (the CPU): each
/// rank deposits its tensor, the last to arrive sums them in rank order (so every rank, and every
/// run, gets the same bits) and wakes the others.
pub struct HostAllReduce {
    rank: usize,
    shared: Arc<HostShared>,
}

struct HostShared {
    state: Mutex<HostState>,
    changed: Condvar,
}

#[derive(Default)]
struct HostState {
    deposits: Vec<Option<Tensor>>,
    /// Completed sums so far; a waiting rank's sum is ready when this passes its round.
    rounds: u64,
    result: Option<Tensor>,
    aborted: bool,
}

impl HostAllReduce {
    /// One handle per rank of a group of `ranks`.
    pub fn group(ranks: usize) -> Vec<HostAllReduce> {
        let shared = Arc::new(HostShared {
            state: Mutex::new(HostState {
                deposits: vec![None; ranks],
                ..HostState::default()
            }),
            changed: Condvar::new(),
        });
        (0..ranks)
            .map(|rank| HostAllReduce {
                rank,
                shared: shared.clone(),
            })
            .collect()
    }
}

impl AllReduce for HostAllReduce {
    fn sum(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let device = x.device().clone();
        let host = x.to_device(&Device::Cpu)?;
        let shared = &*self.shared;
        let mut state = shared.state.lock().expect("all-reduce lock");
        let aborted = || candle_core::Error::Msg("another device's rank failed".into());
        if state.aborted {
            return Err(aborted());
        }
        let round = state.rounds;
        state.deposits[self.rank] = Some(host);
        if state.deposits.iter().all(Option::is_some) {
            let mut parts = state
                .deposits
                .iter_mut()
                .map(|d| d.take().expect("deposited"));
            let first = parts.next().expect("at least one rank");
            let summed = parts.try_fold(first, |acc, part| acc + part);
            shared.changed.notify_all();
            match summed {
                Ok(sum) => {
                    state.result = Some(sum);
                    state.rounds += 1;
                }
                Err(e) => {
                    // The others would wait for a sum that never comes.
                    state.aborted = true;
                    return Err(e);
                }
            }
        } else {
            state = shared
                .changed
                .wait_while(state, |s| s.rounds == round && !s.aborted)
                .expect("all-reduce lock");
            if state.rounds == round {
                return Err(aborted());
            }
        }
        let sum = state.result.clone().expect("set by the last rank");
        drop(state);
        sum.to_device(&device)
    }

    fn abort(&self) {
        let mut state = self.shared.state.lock().expect("all-reduce lock");
        state.aborted = true;
        self.shared.changed.notify_all();
    }
}

/// One handle per device of a tensor-parallel group: NCCL across CUDA devices, host memory
/// across CPU ranks.
pub fn group(devices: &[Device]) -> anyhow::Result<Vec<Arc<dyn AllReduce>>> {
    let cuda = devices.iter().filter(|d| d.is_cuda()).count();
    if cuda == 0 {
        return Ok(HostAllReduce::group(devices.len())
            .into_iter()
            .map(|h| Arc::new(h) as Arc<dyn AllReduce>)
            .collect());
    }
    if cuda < devices.len() {
        anyhow::bail!("the devices of one split model must be all CUDA GPUs (summed by NCCL) or none (summed in host memory)");
    }
    #[cfg(feature = "cuda")]
    return super::nccl::group(devices);
    #[cfg(not(feature = "cuda"))]
    unreachable!("no CUDA device opens without --features cuda");
}

/// What [`check`] found: the group's all-reduce against an f64 sum of the same inputs.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GroupCheck {
    pub transport: &'static str,
    pub ranks: usize,
    pub ok: bool,
    /// Largest |result − f64 sum| relative to the largest |f64 sum|, over every rank and dtype.
    pub max_relative_error: f64,
    /// Whether every rank received the same bits (their next layers must agree exactly).
    pub identical_on_every_rank: bool,
    pub failure: Option<String>,
}

/// Sums random inputs over the group of `devices`, one thread per rank, in f32, bf16 and f16,
/// and checks every rank's result against the f64 sum.
pub fn check(devices: &[Device], seed: u64) -> anyhow::Result<GroupCheck> {
    use candle_core::DType;
    use rand::{Rng, SeedableRng};
    let transport = if devices.iter().all(Device::is_cuda) {
        "nccl"
    } else {
        "host memory"
    };
    let handles = group(devices)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let len = 4099;
    let mut worst = 0f64;
    let mut identical = true;
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let inputs = devices
            .iter()
            .map(|device| {
                let values: Vec<f32> = (0..len).map(|_| rng.random_range(-4.0..4.0)).collect();
                Ok(Tensor::from_vec(values, len, &Device::Cpu)?
                    .to_dtype(dtype)?
                    .to_device(device)?)
            })
            .collect::<anyhow::Result<Vec<Tensor>>>()?;
        let as_f64 = |t: &Tensor| -> candle_core::Result<Vec<f64>> {
            t.to_dtype(DType::F32)?.to_dtype(DType::F64)?.to_vec1()
        };
        let mut expected = vec![0f64; len];
        for input in &inputs {
            for (e, v) in expected.iter_mut().zip(as_f64(input)?) {
                *e += v;
            }
        }
        let sums = std::thread::scope(|s| {
            let threads: Vec<_> = handles
                .iter()
                .zip(&inputs)
                .map(|(handle, input)| s.spawn(move || handle.sum(input)))
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().expect("an all-reduce thread panicked"))
                .collect::<candle_core::Result<Vec<Tensor>>>()
        })?;
        let scale = expected.iter().fold(1f64, |m, e| m.max(e.abs()));
        let first = as_f64(&sums[0])?;
        for sum in &sums {
            let got = as_f64(sum)?;
            identical &= got == first;
            for (g, e) in got.iter().zip(&expected) {
                worst = worst.max((g - e).abs() / scale);
            }
        }
    }
    // One rounding of the sum to the narrowest dtype (f16, bf16's 8 bits) per addition.
    let tolerance = 2f64.powi(-8) * devices.len() as f64;
    let failure = if !identical {
        Some("the ranks received different sums".to_string())
    } else if worst > tolerance {
        Some(format!("error {worst:.2e} > {tolerance:.1e}"))
    } else {
        None
    };
    Ok(GroupCheck {
        transport,
        ranks: devices.len(),
        ok: failure.is_none(),
        max_relative_error: worst,
        identical_on_every_rank: identical,
        failure,
    })
}
