//! Communicators and collectives for Tessera.
