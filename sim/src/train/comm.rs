//! The replicas' communication: a hierarchical all-reduce (the replicas
//! of an instance, then the instances), exact integer sums, and the
//! bitwise check that replicated tensors agree.
//!
//! Every replica has a rank in its instance's world of host threads
//! ([`ThreadCommunicator`]). The instances talk through one communicator
//! per instance (threads of this process, or MPI processes), which stays
//! on the thread that runs the instance: an MPI communicator belongs to
//! the thread that initialised MPI. The instance's first replica hands its
//! requests to that thread over a channel ([`InstanceLink`], [`serve`]).
//!
//! A reduction is a reduce to the instance's first replica, an all-reduce
//! among the instances and a broadcast back, all in
//! [`Order::Deterministic`](tessera_collectives::Order::Deterministic):
//! with a power of two of replicas per instance the sums are bitwise those
//! of one flat all-reduce over every replica, for any number of instances
//! (see [`tessera_core::collective`]'s deterministic order).

use std::sync::mpsc::{Receiver, Sender, channel};

use tessera_collectives::{
    Collectives, CommError, Communicator, Options, ReduceOp, Reducer, ThreadCommunicator,
};

/// Bits per limb of the exact integer sums: sums of up to 2^16
/// contributions of 8-bit limbs stay below 2^24, exact in f32 in any order.
const LIMB_BITS: u32 = 8;
/// Limbs per 64-bit word.
pub(crate) const LIMBS_PER_WORD: usize = 64 / LIMB_BITS as usize;

/// The options of every collective of the trainer.
pub(crate) fn options() -> Options {
    Options::new().deterministic()
}

/// A collective between the instances, asked of the instance's thread.
enum Request {
    AllReduce(ReduceOp, Vec<f32>),
    Broadcast(Vec<f32>),
}

/// The first replica's end of the channel to its instance's thread.
pub(crate) struct InstanceLink {
    requests: Sender<Request>,
    replies: Receiver<Result<Vec<f32>, CommError>>,
}

impl InstanceLink {
    /// A link and the instance thread's ends of it, for [`serve`].
    pub(crate) fn new() -> (Self, Served) {
        let (requests, asked) = channel();
        let (answer, replies) = channel();
        (Self { requests, replies }, Served { asked, answer })
    }

    fn call(&self, request: Request, buf: &mut [f32]) -> Result<(), CommError> {
        // The instance's thread is gone: it stopped on an error of its own.
        let gone = CommError::PeerFailed {
            rank: 0,
            cause: tessera_collectives::Cause::Exited,
        };
        self.requests.send(request).map_err(|_| gone)?;
        let values = self.replies.recv().map_err(|_| gone)??;
        buf.copy_from_slice(&values);
        Ok(())
    }
}

/// The instance thread's ends of an [`InstanceLink`].
pub(crate) struct Served {
    asked: Receiver<Request>,
    answer: Sender<Result<Vec<f32>, CommError>>,
}

/// Runs the first replica's requests on `instances` until it hangs up (or
/// a collective fails: the error goes to the replica, and is returned).
pub(crate) fn serve<C: Communicator>(
    instances: &mut Collectives<C>,
    served: &Served,
) -> Result<(), CommError> {
    for request in &served.asked {
        let result = match request {
            Request::AllReduce(op, mut values) => instances
                .all_reduce(&mut values, Reducer::new(op))
                .map(|_| values),
            Request::Broadcast(mut values) => instances.broadcast(&mut values, 0).map(|_| values),
        };
        let failed = result.as_ref().err().copied();
        if served.answer.send(result).is_err() {
            break;
        }
        if let Some(e) = failed {
            return Err(e);
        }
    }
    Ok(())
}

/// One replica's view of the replicas' communication.
pub(crate) struct ReplicaComm {
    local: Collectives<ThreadCommunicator>,
    instances: Option<InstanceLink>,
}

impl ReplicaComm {
    /// `local` is this replica's rank among its instance's replicas;
    /// `instances` the link to the instance's thread, on the instance's
    /// first replica when there are several instances.
    pub(crate) fn new(local: ThreadCommunicator, instances: Option<InstanceLink>) -> Self {
        Self {
            local: Collectives::new(local).with_options(options()),
            instances,
        }
    }

    /// This replica's rank in its instance.
    pub(crate) fn local_rank(&self) -> usize {
        self.local.rank()
    }

    /// Replicas in this instance.
    pub(crate) fn local_size(&self) -> usize {
        self.local.size()
    }

    /// The collectives among this instance's replicas.
    pub(crate) fn local(&mut self) -> &mut Collectives<ThreadCommunicator> {
        &mut self.local
    }

    /// Every replica of every instance ends with the reduction (`op`) of
    /// all replicas' `buf`, bitwise the same everywhere.
    pub(crate) fn all_reduce(&mut self, buf: &mut [f32], op: ReduceOp) -> Result<(), CommError> {
        let reduction = Reducer::new(op);
        self.local.reduce(buf, reduction, 0)?;
        if let Some(link) = &self.instances {
            link.call(Request::AllReduce(op, buf.to_vec()), buf)?;
        }
        self.local.broadcast(buf, 0)?;
        Ok(())
    }

    /// Every replica ends with the first instance's first replica's `buf`
    /// (PopDist's broadcast of the initial weights from instance 0).
    pub(crate) fn broadcast(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        if let Some(link) = &self.instances {
            link.call(Request::Broadcast(buf.to_vec()), buf)?;
        }
        self.local.broadcast(buf, 0)?;
        Ok(())
    }

    /// Whether every replica's `words` equal this replica's (an all-reduce
    /// of their maxima and minima).
    pub(crate) fn all_equal(&mut self, words: &[u64]) -> Result<bool, CommError> {
        let mut max = to_limbs(words);
        let mut min = max.clone();
        self.all_reduce(&mut max, ReduceOp::Max)?;
        self.all_reduce(&mut min, ReduceOp::Min)?;
        Ok(max == min)
    }
}

/// `words` as f32 limbs of [`LIMB_BITS`] bits, least significant first.
pub(crate) fn to_limbs(words: &[u64]) -> Vec<f32> {
    let mut out = vec![0.0; words.len() * LIMBS_PER_WORD];
    write_limbs(words, &mut out);
    out
}

/// Writes `words` as limbs into `out` (`LIMBS_PER_WORD` per word).
pub(crate) fn write_limbs(words: &[u64], out: &mut [f32]) {
    let mask = (1u64 << LIMB_BITS) - 1;
    for (w, limbs) in words.iter().zip(out.chunks_exact_mut(LIMBS_PER_WORD)) {
        for (j, l) in limbs.iter_mut().enumerate() {
            // At most 255: exact.
            *l = ((w >> (LIMB_BITS * j as u32)) & mask) as f32;
        }
    }
}

/// The words whose limbs, summed over contributions, are `limbs`: the
/// wrapping sums of the contributions' words.
pub(crate) fn from_limb_sums(limbs: &[f32]) -> Vec<u64> {
    limbs
        .chunks_exact(LIMBS_PER_WORD)
        .map(|l| {
            l.iter().enumerate().fold(0u64, |acc, (j, &x)| {
                // Sums of limbs are integers below 2^24.
                acc.wrapping_add((x as u64).wrapping_shl(LIMB_BITS * j as u32))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use tessera_collectives::ThreadWorld;

    use super::*;

    #[test]
    fn limb_sums_are_exact_wrapping_sums() {
        let words = [[u64::MAX, 3, 1 << 63], [1, u64::MAX - 1, 1 << 63]];
        let mut sum = vec![0.0f32; 3 * LIMBS_PER_WORD];
        for w in &words {
            for (s, l) in sum.iter_mut().zip(to_limbs(w)) {
                *s += l;
            }
        }
        assert_eq!(from_limb_sums(&sum), vec![0, 1, 0]);
    }

    #[test]
    fn hierarchical_all_reduce_equals_flat_and_finds_differences() {
        // 2 instances of 2 replicas: contributions 1, 1e8, -1e8, 1 summed
        // in the deterministic tree ((1 + 1e8) + (-1e8 + 1)).
        let values = [1.0f32, 1.0e8, -1.0e8, 1.0];
        let expected = (1.0f32 + 1.0e8) + (-1.0e8 + 1.0);
        let instances = ThreadWorld::new(2).unwrap().into_communicators();
        let results: Vec<(f32, bool, bool)> = std::thread::scope(|s| {
            let handles: Vec<_> = instances
                .into_iter()
                .enumerate()
                .flat_map(|(i, inst)| {
                    let locals = ThreadWorld::new(2).unwrap().into_communicators();
                    let mut inst = Some(inst);
                    let (link, served) = InstanceLink::new();
                    let mut link = Some(link);
                    let server = s.spawn(move || {
                        let mut c = Collectives::new(inst.take().unwrap()).with_options(options());
                        serve(&mut c, &served).unwrap();
                        (f32::NAN, true, false)
                    });
                    let mut replicas: Vec<_> = locals
                        .into_iter()
                        .map(|local| {
                            let r = local.rank();
                            let inter = if r == 0 { link.take() } else { None };
                            s.spawn(move || {
                                let mut comm = ReplicaComm::new(local, inter);
                                let mut x = [values[2 * i + r]];
                                comm.all_reduce(&mut x, ReduceOp::Sum).unwrap();
                                let same = comm.all_equal(&[7, 9]).unwrap();
                                let differ = comm.all_equal(&[7, (2 * i + r) as u64]).unwrap();
                                (x[0], same, differ)
                            })
                        })
                        .collect();
                    replicas.push(server);
                    replicas
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let results: Vec<_> = results.into_iter().filter(|r| !r.0.is_nan()).collect();
        assert_eq!(results.len(), 4);
        for (x, same, differ) in results {
            assert_eq!(x.to_bits(), expected.to_bits());
            assert!(same && !differ);
        }
    }
}
