//! The pure parts of collectives.
