//! placeholder during bootstrap
#![no_std]
