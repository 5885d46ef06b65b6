//! What the test binaries share, declared once by each (`#[path = "../support/mod.rs"] mod
//! support;` in an area's `main.rs`, `mod support;` in a binary of one file). A binary uses
//! what it needs of it.
#![allow(dead_code, unused_imports)]

pub mod count_if;
pub mod counting_alloc;
pub mod drive;
#[cfg(feature = "redis")]
pub mod hammer;
pub mod http;
pub mod in_flight;
pub mod live;
pub mod live_app;
pub mod logs;
pub mod oracle;
#[cfg(feature = "redis")]
pub mod parity;
pub mod redis;
pub mod request;
pub mod rng;
pub mod services;
pub mod stores;
