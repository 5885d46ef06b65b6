//! Keys: extractors, the client-IP walk, the allow list, injectivity.

#[path = "../support/mod.rs"]
mod support;

mod allow_props;
mod client_ip;
mod client_ip_props;
mod key_injective;
mod keys;
