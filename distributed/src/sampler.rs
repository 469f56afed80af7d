//! `DistributedSampler`: each rank's share of a dataset's indices (PyTorch's
//! `torch.utils.data.DistributedSampler`).

use tensorplay_runtime::{Error, Result};

/// The indices of a dataset one rank reads in an epoch: the (optionally shuffled) indices,
/// padded by wrapping around to a multiple of the number of replicas (or truncated with
/// `drop_last`), then every `num_replicas`-th from `rank` on. All ranks use the same `seed`, so
/// together they read each index once per epoch; [`DistributedSampler::set_epoch`] reshuffles.
///
/// ```
/// use tensorplay_distributed::DistributedSampler;
/// let s0 = DistributedSampler::new(10, 2, 0, false, 0, false)?;
/// let s1 = DistributedSampler::new(10, 2, 1, false, 0, false)?;
/// assert_eq!(s0.indices(), vec![0, 2, 4, 6, 8]);
/// assert_eq!(s1.indices(), vec![1, 3, 5, 7, 9]);
/// // Shuffled: the two ranks still cover every index once.
/// let mut a = DistributedSampler::new(7, 2, 0, true, 42, false)?;
/// let mut b = DistributedSampler::new(7, 2, 1, true, 42, false)?;
/// a.set_epoch(3);
/// b.set_epoch(3);
/// let mut all = [a.indices(), b.indices()].concat();
/// assert_eq!(all.len(), 8); // padded to a multiple of 2
/// all.sort();
/// all.dedup();
/// assert_eq!(all, (0..7).collect::<Vec<_>>());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct DistributedSampler {
    len: usize,
    num_replicas: usize,
    rank: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
    epoch: u64,
}

impl DistributedSampler {
    /// A sampler over `len` items for rank `rank` of `num_replicas`.
    pub fn new(
        len: usize,
        num_replicas: usize,
        rank: usize,
        shuffle: bool,
        seed: u64,
        drop_last: bool,
    ) -> Result<DistributedSampler> {
        if num_replicas == 0 || rank >= num_replicas {
            return Err(Error::argument(
                "DistributedSampler",
                "rank",
                format!("a rank below num_replicas = {num_replicas}"),
                rank.to_string(),
            ));
        }
        Ok(DistributedSampler {
            len,
            num_replicas,
            rank,
            shuffle,
            seed,
            drop_last,
            epoch: 0,
        })
    }

    /// A sampler for this process in the default group.
    pub fn for_world(len: usize, shuffle: bool, seed: u64) -> Result<DistributedSampler> {
        DistributedSampler::new(
            len,
            crate::group::world_size()?,
            crate::group::rank()?,
            shuffle,
            seed,
            false,
        )
    }

    /// Sets the epoch, which reseeds the shuffle (call it before each epoch on every rank).
    pub fn set_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
    }

    /// How many indices each rank reads per epoch.
    pub fn num_samples(&self) -> usize {
        if self.drop_last {
            self.len / self.num_replicas
        } else {
            self.len.div_ceil(self.num_replicas)
        }
    }

    /// This rank's indices for the current epoch.
    pub fn indices(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.len).collect();
        if self.shuffle {
            shuffle(&mut order, self.seed.wrapping_add(self.epoch));
        }
        let total = self.num_samples() * self.num_replicas;
        if total > order.len() && !order.is_empty() {
            let pad: Vec<usize> = order
                .iter()
                .copied()
                .cycle()
                .take(total - order.len())
                .collect();
            order.extend(pad);
        }
        order.truncate(total);
        order
            .into_iter()
            .skip(self.rank)
            .step_by(self.num_replicas)
            .collect()
    }
}

/// Fisher–Yates with a SplitMix64 stream: the same permutation on every rank for a seed.
fn shuffle(v: &mut [usize], seed: u64) {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for i in (1..v.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}
