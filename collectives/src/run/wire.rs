//! The wire format of a collective's messages: every message starts with
//! a [`HEADER`]-byte header naming the call (sequence number, collective,
//! algorithm, order, operation, element type, group size, length) and the
//! message (step, span, covered ranks, body length), so that a rank
//! called differently from its peers is found at its first message.

use tessera_core::collective::{
    Algorithm, Collective, CollectiveSchedule, Kind, Order, ReduceOp, Span,
};
use tessera_core::fp::Element;

use crate::error::Mismatch;

/// Bytes of the header before every message's values.
pub(crate) const HEADER: usize = 96;

const MAGIC: u32 = u32::from_le_bytes(*b"TSC1");

/// The call-wide fields of a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Call {
    seq: u32,
    size: u32,
    len: u64,
    dtype: u8,
    collective: u8,
    root: u32,
    algorithm: u8,
    order: u8,
    op: u8,
}

/// A message's own fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Message {
    pub(super) step: u32,
    span: Span,
    kind: u8,
    covers: (u32, u32),
    pub(super) body: u64,
}

fn dtype_code(name: &str) -> u8 {
    match name {
        "f32" => 1,
        "f16" => 2,
        "bf16" => 3,
        _ => 0,
    }
}

fn dtype_name(code: u8) -> &'static str {
    match code {
        1 => "f32",
        2 => "f16",
        3 => "bf16",
        _ => "unknown",
    }
}

impl Call {
    pub(super) fn new<T: Element>(s: &CollectiveSchedule, op: ReduceOp, seq: u32) -> Self {
        let (collective, root) = match s.collective() {
            Collective::ReduceScatter => (0, 0),
            Collective::AllGather => (1, 0),
            Collective::AllReduce => (2, 0),
            Collective::Reduce { root } => (3, root),
            Collective::Broadcast { root } => (4, root),
        };
        let algorithm = match s.algorithm() {
            Algorithm::Ring => 0,
            Algorithm::BidirectionalRing => 1,
            Algorithm::DoubleBinaryTree => 2,
            Algorithm::HalvingDoubling => 3,
        };
        let op = if s.collective().reduces() {
            match op {
                ReduceOp::Sum => 1,
                ReduceOp::Mean => 2,
                ReduceOp::Max => 3,
                ReduceOp::Min => 4,
            }
        } else {
            0
        };
        Self {
            seq,
            // CollectiveSchedule::MAX_RANKS is 2^24.
            size: u32::try_from(s.size()).unwrap_or(u32::MAX),
            len: s.len() as u64,
            dtype: dtype_code(T::NAME),
            collective,
            root: u32::try_from(root).unwrap_or(u32::MAX),
            algorithm,
            order: match s.order() {
                Order::Deterministic => 0,
                Order::Schedule => 1,
                Order::Free => 2,
            },
            op,
        }
    }

    /// The first field in which `theirs` differs, most telling first.
    pub(super) fn mismatch(&self, theirs: &Self) -> Option<Mismatch> {
        if self.size != theirs.size {
            Some(Mismatch::GroupSize {
                ours: self.size.into(),
                theirs: theirs.size.into(),
            })
        } else if self.dtype != theirs.dtype {
            Some(Mismatch::ElementType {
                ours: dtype_name(self.dtype),
                theirs: dtype_name(theirs.dtype),
            })
        } else if self.len != theirs.len {
            Some(Mismatch::Length {
                ours: self.len,
                theirs: theirs.len,
            })
        } else if (self.collective, self.root) != (theirs.collective, theirs.root) {
            Some(Mismatch::Collective)
        } else if self.op != theirs.op {
            Some(Mismatch::Operation)
        } else if (self.algorithm, self.order) != (theirs.algorithm, theirs.order) {
            Some(Mismatch::Algorithm)
        } else if self.seq != theirs.seq {
            Some(Mismatch::Sequence)
        } else {
            None
        }
    }
}

impl Message {
    /// Whether this is the message `expect` describes (its body aside).
    pub(super) fn is(&self, expect: &Self) -> bool {
        (self.step, self.span, self.kind, self.covers)
            == (expect.step, expect.span, expect.kind, expect.covers)
    }

    pub(super) fn new(step: usize, span: Span, kind: Kind, body: usize) -> Self {
        let (kind, covers) = match kind {
            Kind::Copy => (0, (0, 0)),
            Kind::Reduce { covers, .. } => (1, (covers.start as u32, covers.len as u32)),
        };
        Self {
            step: step as u32,
            span,
            kind,
            covers,
            body: body as u64,
        }
    }
}

pub(super) fn encode(call: &Call, m: &Message) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    let mut put = |at: usize, bytes: &[u8]| h[at..at + bytes.len()].copy_from_slice(bytes);
    put(0, &MAGIC.to_le_bytes());
    put(4, &call.seq.to_le_bytes());
    put(8, &m.step.to_le_bytes());
    put(12, &call.size.to_le_bytes());
    put(
        16,
        &[
            call.collective,
            call.algorithm,
            call.order,
            call.op,
            call.dtype,
            m.kind,
        ],
    );
    put(24, &call.root.to_le_bytes());
    put(28, &m.covers.0.to_le_bytes());
    put(32, &m.covers.1.to_le_bytes());
    put(40, &call.len.to_le_bytes());
    put(48, &(m.span.start as u64).to_le_bytes());
    put(56, &(m.span.len as u64).to_le_bytes());
    put(64, &(m.span.stride as u64).to_le_bytes());
    put(72, &(m.span.count as u64).to_le_bytes());
    put(80, &m.body.to_le_bytes());
    h
}

pub(super) fn decode(h: &[u8]) -> Option<(Call, Message)> {
    if h.len() < HEADER {
        return None;
    }
    let u32_at = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"));
    if u32_at(0) != MAGIC {
        return None;
    }
    let usize_at = |at: usize| usize::try_from(u64_at(at)).ok();
    let span = Span::strided(usize_at(48)?, usize_at(56)?, usize_at(64)?, usize_at(72)?);
    Some((
        Call {
            seq: u32_at(4),
            size: u32_at(12),
            len: u64_at(40),
            dtype: h[20],
            collective: h[16],
            root: u32_at(24),
            algorithm: h[17],
            order: h[18],
            op: h[19],
        },
        Message {
            step: u32_at(8),
            span,
            kind: h[21],
            covers: (u32_at(28), u32_at(32)),
            body: u64_at(80),
        },
    ))
}

/// The step named in the headers of a zero-length call's messages
/// (the runner's handshake): no schedule has that many steps.
pub(super) const HANDSHAKE_STEP: usize = u32::MAX as usize;

/// A received message's header and body from the two parts a transport
/// hands to [`Communicator::exchange_apply`]'s `apply`: one part holding
/// both, or the header then the body. `None` if neither.
pub(super) fn split_header<'m>(head: &'m [u8], tail: &'m [u8]) -> Option<(&'m [u8], &'m [u8])> {
    if tail.is_empty() && head.len() >= HEADER {
        Some(head.split_at(HEADER))
    } else if head.len() == HEADER {
        Some((head, tail))
    } else {
        None
    }
}

/// As [`split_header`] for a message whose header is followed by
/// `extra` bytes (the sender's block exponents, see
/// `run::folds_exponents`): the header, those bytes and the body.
pub(super) fn split_exponents<'m>(
    head: &'m [u8],
    tail: &'m [u8],
    extra: usize,
) -> Option<(&'m [u8], &'m [u8], &'m [u8])> {
    let (first, body) = if tail.is_empty() && head.len() >= HEADER + extra {
        head.split_at(HEADER + extra)
    } else if head.len() == HEADER + extra {
        (head, tail)
    } else {
        return None;
    };
    let (header, exps) = first.split_at(HEADER);
    Some((header, exps, body))
}

/// The values of a message body, cast in place when aligned, else copied.
pub(super) fn values<'a, V: bytemuck::AnyBitPattern>(
    bytes: &'a [u8],
    tmp: &'a mut Vec<V>,
) -> &'a [V] {
    match bytemuck::try_cast_slice(bytes) {
        Ok(v) => v,
        Err(_) => {
            tmp.clear();
            tmp.extend(
                bytes
                    .chunks_exact(size_of::<V>())
                    .map(bytemuck::pod_read_unaligned::<V>),
            );
            tmp
        }
    }
}
