//! Per-CPU page lists over the buddy allocator (work in progress: sizing
//! and statistics are in place; the lists follow once the buddy API lands).
#![no_std]

pub mod sizing;
pub mod stats;
