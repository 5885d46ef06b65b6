//! Requests for the tests: a method and path, headers, and the peer address the layer reads
//! (recorded as a [`PeerAddr`], as a server does).
#![allow(dead_code)]

use std::net::SocketAddr;

use http::{Method, Request, Version};
use tollgate::key::PeerAddr;

/// A request being built: `GET /` over HTTP/1.1, no headers, no peer address until one is set.
#[must_use]
pub struct Req {
    builder: http::request::Builder,
    peer: Option<SocketAddr>,
}

impl Req {
    /// `GET /`.
    pub fn new() -> Self {
        Self {
            builder: Request::builder(),
            peer: None,
        }
    }

    /// From `peer`, an `ip:port` (`192.0.2.1:1`, `[2001:db8::1]:1`).
    pub fn from(self, peer: &str) -> Self {
        self.peer(peer.parse().unwrap())
    }

    /// From `peer`.
    pub fn peer(mut self, peer: SocketAddr) -> Self {
        self.peer = Some(peer);
        self
    }

    /// To `path` (a path and query, such as `/users/42?page=2`).
    pub fn path(mut self, path: &str) -> Self {
        self.builder = self.builder.uri(path);
        self
    }

    /// With the method `method`.
    pub fn method(mut self, method: Method) -> Self {
        self.builder = self.builder.method(method);
        self
    }

    /// With one more header line.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.builder = self.builder.header(name, value);
        self
    }

    /// With these header lines, in order.
    pub fn headers(self, headers: &[(&str, &str)]) -> Self {
        headers
            .iter()
            .fold(self, |req, (name, value)| req.header(name, value))
    }

    /// A gRPC request: a `POST` over HTTP/2, as gRPC always is, with this `content-type`.
    pub fn grpc(mut self, content_type: &str) -> Self {
        self.builder = self.builder.method(Method::POST).version(Version::HTTP_2);
        self.header("content-type", content_type)
    }

    /// The request, with `body`.
    pub fn body<B>(self, body: B) -> Request<B> {
        let mut req = self.builder.body(body).unwrap();
        if let Some(peer) = self.peer {
            req.extensions_mut().insert(PeerAddr(peer));
        }
        req
    }

    /// The request, with an empty body.
    pub fn build<B: Default>(self) -> Request<B> {
        self.body(B::default())
    }
}
