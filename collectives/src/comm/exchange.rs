//! What an exchange moves: messages to send (read, or lent to be written)
//! and to receive, and what is called with received ones.

use super::Tag;
use crate::error::CommError;

#[cfg(doc)]
use super::Communicator;

/// A message to send: `header` then `body`, delivered as one message (the
/// receiver sees their concatenation). Two parts let a sender put a small
/// header before a large body that stays where it is, with no copy.
#[derive(Clone, Copy, Debug)]
pub struct Outgoing<'a> {
    /// The receiver.
    pub to: usize,
    /// The tag.
    pub tag: Tag,
    /// The first bytes (may be empty).
    pub header: &'a [u8],
    /// The rest.
    pub body: &'a [u8],
}

impl<'a> Outgoing<'a> {
    /// A message of `data` alone.
    ///
    /// ```
    /// use tessera_collectives::Outgoing;
    ///
    /// let m = Outgoing::new(1, 7, b"hello");
    /// assert_eq!((m.to, m.tag, m.header.len(), m.body), (1, 7, 0, &b"hello"[..]));
    /// ```
    #[must_use]
    pub const fn new(to: usize, tag: Tag, data: &'a [u8]) -> Self {
        Self {
            to,
            tag,
            header: &[],
            body: data,
        }
    }

    /// The message's length in bytes.
    ///
    /// ```
    /// use tessera_collectives::Outgoing;
    ///
    /// let m = Outgoing { to: 0, tag: 1, header: b"head", body: b"body!" };
    /// assert_eq!(m.len(), 9);
    /// ```
    #[must_use]
    pub const fn len(&self) -> usize {
        self.header.len() + self.body.len()
    }

    /// Whether the message has no bytes.
    ///
    /// ```
    /// use tessera_collectives::Outgoing;
    ///
    /// assert!(Outgoing::new(0, 1, &[]).is_empty());
    /// ```
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A body that [`Communicator::exchange_mut_many`] lends mutably to `to`,
/// after `header`.
#[derive(Debug)]
pub struct OutgoingMut<'a> {
    /// The receiver.
    pub to: usize,
    /// The first bytes (may be empty).
    pub header: &'a [u8],
    /// The rest, which the receiver may read and write.
    pub body: &'a mut [u8],
}

/// What [`Communicator::exchange_mut_many`] calls once with every peer's
/// message, in the order of its `from`: each message's header, then its
/// body, which this rank may read and write in place.
pub type ApplyMany<'f> = dyn FnMut(&mut [(&[u8], &mut [u8])]) -> Result<(), CommError> + 'f;

/// What [`Communicator::exchange_mut`] calls once with the peer's message:
/// its header, then its body, which this rank may read and write in place.
pub type ApplyMut<'f> = dyn FnMut(&[u8], &mut [u8]) -> Result<(), CommError> + 'f;

/// What [`Communicator::exchange_apply`] calls for each received message:
/// with its index in `recvs`, then the message as two parts to be read one
/// after the other.
pub type Apply<'f> = dyn FnMut(usize, &[u8], &[u8]) -> Result<(), CommError> + 'f;

/// A message to receive: the next one from `from` with `tag`.
/// [`Communicator::exchange`] puts it in `message` (replacing what was
/// there; the old vector's capacity may be reused by the transport, and
/// `message`'s capacity is reused when it is large enough).
#[derive(Clone, Debug, Default)]
pub struct Incoming {
    /// The sender.
    pub from: usize,
    /// The tag.
    pub tag: Tag,
    /// The message, once received.
    pub message: Vec<u8>,
}

impl Incoming {
    /// The next message from `from` with `tag`, with an empty buffer.
    ///
    /// ```
    /// use tessera_collectives::Incoming;
    ///
    /// let m = Incoming::new(2, 5);
    /// assert_eq!((m.from, m.tag, m.message.len()), (2, 5, 0));
    /// ```
    #[must_use]
    pub const fn new(from: usize, tag: Tag) -> Self {
        Self {
            from,
            tag,
            message: Vec::new(),
        }
    }
}
