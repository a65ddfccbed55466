//! Placeholder: filled by the adapter work.
