//! The layer over HTTP: plain tower, axum, hyper and tonic servers, answers, headers, stacked layers, shaping, count_if, metrics.

#[path = "../support/mod.rs"]
mod support;

mod answers;
mod attack_32;
mod axum_server;
mod count_if;
mod crate_modules;
mod grpc_detection;
mod header_styles;
mod hyper_server;
mod layer;
mod layer_modules;
mod layer_types;
#[cfg(feature = "metrics")]
mod observe;
mod settle;
mod settle_attacks;
mod shaping_readiness;
mod stacked_layers;
mod tonic_server;
