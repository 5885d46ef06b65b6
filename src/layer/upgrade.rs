//! The slot of an upgraded connection: [`InFlightSlot`], which a request that may switch
//! protocols shares with its handler, so that the connection (a WebSocket, a tunnel) holds its
//! in-flight slot for its whole life, and [`Held`], what the response holds meanwhile.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use http::header::UPGRADE;
use http::{Method, Request, Response, StatusCode};

use super::response::own_answer;
use crate::limiter::Hold;

/// The in-flight slot of a request that asks to switch protocols (a WebSocket, or any
/// upgrade), for the handler to keep for the upgraded connection's life.
///
/// A limit on requests in flight ([`InFlightLayer`](crate::InFlightLayer))
/// gives a slot back when the response ends. A `101 Switching Protocols` (or a `2xx` answer to
/// `CONNECT`: an HTTP/2 WebSocket, a tunnel) ends the response but not the connection, which
/// the handler takes over out of the middleware's sight. So the layer puts this handle in the
/// extensions of every admitted request with an `Upgrade` field or the method `CONNECT` (the
/// requests hyper can upgrade), and once the response switches protocols, the slot is held as
/// long as any clone of this handle lives: move one into the task that serves the connection.
///
/// - **Nobody keeps it**: when a response switches protocols and no clone of the request's
///   slot is left, the layer cannot count the connection, so it refuses it: the `101` is
///   replaced by a `500` whose body, and the first error logged, name this fix (or
///   [`skip`](crate::InFlightLayer::skip) the route in the in-flight layer). The connection is
///   never upgraded: axum's `on_upgrade` callback does not run. This holds in a
///   [`dry_run`](crate::InFlightLayer::dry_run) too, as for a key the server cannot extract.
/// - **Any other response** (the upgrade refused, a plain answer to a request that carried an
///   `Upgrade` field) gives the slot back when its body ends, as every response does, whatever
///   clones are left.
/// - **Clones are one slot**: a handler may clone it freely; the slot comes back once, when
///   the last clone is dropped (the connection's task ending, returning or panicking).
/// - **Stacked in-flight layers** chain their slots: the handle in the extensions holds the slot
///   of every in-flight layer the request went through.
/// - **Redis** (`RedisStore`): the slot is a lease that its server renews while it is held,
///   so a long-lived connection keeps it (see
///   [`lease_ttl`](crate::InFlightLayer::lease_ttl) for what an outage longer than the TTL
///   does).
///
/// A plain hyper service that moves the request into the task serving the upgraded connection
/// keeps the slot with it; one that keeps only `hyper::upgrade::on(&mut req)` must take the
/// slot out too: `req.extensions_mut().remove::<InFlightSlot>()`.
///
/// ```
/// use std::net::SocketAddr;
/// use axum::extract::ws::{WebSocket, WebSocketUpgrade};
/// use axum::extract::Extension;
/// use axum::response::Response;
/// use axum::{routing::get, Router};
/// use tollgate::{InFlightLayer, InFlightSlot};
///
/// async fn chat(upgrade: WebSocketUpgrade, Extension(slot): Extension<InFlightSlot>) -> Response {
///     upgrade.on_upgrade(move |socket| async move {
///         // The slot is held until the connection's task ends.
///         let _slot = slot;
///         serve(socket).await;
///     })
/// }
/// # async fn serve(mut socket: WebSocket) { while let Some(Ok(_)) = socket.recv().await {} }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // At most 2 open WebSockets per client IP.
/// let app = Router::new()
///     .route("/chat", get(chat))
///     .layer(InFlightLayer::new(2).policy_name("sockets"));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// # let addr = listener.local_addr()?;
/// tokio::spawn(async move {
///     axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
/// });
/// # use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// # let open = || async move {
/// #     let mut stream = tokio::net::TcpStream::connect(addr).await?;
/// #     stream.write_all(b"GET /chat HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n\
/// #         Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
/// #         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").await?;
/// #     let mut head = Vec::new();
/// #     while !head.ends_with(b"\r\n\r\n") {
/// #         head.push(stream.read_u8().await?);
/// #     }
/// #     Ok::<_, std::io::Error>((stream, String::from_utf8_lossy(&head).into_owned()))
/// # };
/// # let (first, head) = open().await?;
/// # assert!(head.starts_with("HTTP/1.1 101"), "{head}");
/// # let (_second, head) = open().await?;
/// # assert!(head.starts_with("HTTP/1.1 101"), "{head}");
/// // Two sockets open: a third is refused until one closes.
/// # let (_, head) = open().await?;
/// # assert!(head.starts_with("HTTP/1.1 429"), "{head}");
/// # drop(first);
/// # let mut admitted = false;
/// # for _ in 0..1000 {
/// #     if open().await?.1.starts_with("HTTP/1.1 101") { admitted = true; break; }
/// #     tokio::task::yield_now().await;
/// # }
/// # assert!(admitted);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct InFlightSlot {
    cell: Arc<Cell>,
}

/// What the clones of an [`InFlightSlot`] share.
struct Cell {
    /// The slot, until given back: by the response's body when the response does not switch
    /// protocols, else when the last clone is dropped.
    hold: Mutex<Option<Hold>>,
    /// The slot the request holds in an in-flight layer outside this one, held as long.
    outer: Option<InFlightSlot>,
}

impl InFlightSlot {
    /// A slot holding `hold`, chained to `outer`.
    fn new(hold: Option<Hold>, outer: Option<InFlightSlot>) -> Self {
        let hold = Mutex::new(hold);
        Self {
            cell: Arc::new(Cell { hold, outer }),
        }
    }

    /// The slot, until given back.
    fn hold(&self) -> MutexGuard<'_, Option<Hold>> {
        self.cell
            .hold
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The policy name of the limit whose slot this is, while it is held.
    fn policy(&self) -> String {
        let hold = self.hold();
        hold.as_ref()
            .map_or_else(String::new, |hold| hold.policy().to_owned())
    }

    /// Whether the slot is still held (not given back).
    fn is_held(&self) -> bool {
        self.hold().is_some()
    }
}

impl fmt::Debug for InFlightSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightSlot")
            .field("held", &self.is_held())
            .field("outer", &self.cell.outer)
            .finish()
    }
}

/// The slots an admitted request holds while its response is on its way, given back when the
/// response ends: the request's alone, or shared with its handler through an [`InFlightSlot`]
/// (a request that may switch protocols).
#[derive(Debug)]
pub(crate) enum Held {
    Alone(Hold),
    Shared(Shared),
}

/// The response's share of an [`InFlightSlot`]: dropped, it gives the slot back, unless the
/// response switched protocols ([`Held::answered`]).
#[derive(Debug)]
pub(crate) struct Shared {
    slot: Option<InFlightSlot>,
    /// Whether the request is a `CONNECT`, which a `2xx` answer turns into a tunnel.
    connect: bool,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Given back now, whatever clones are left.
        let hold = self.slot.take().and_then(|slot| slot.hold().take());
        drop(hold);
    }
}

/// Whether hyper may upgrade `req`: an `Upgrade` field (HTTP/1.1) or `CONNECT` (a tunnel, or an
/// HTTP/2 extended `CONNECT` such as a WebSocket). Looser than any server's own rule (a field
/// on an HTTP/1.0 request, a `Connection` without `upgrade`): a response that switches
/// protocols for a request this misses is refused, never let through uncounted.
fn may_upgrade<B>(req: &Request<B>) -> bool {
    req.method() == Method::CONNECT || req.headers().contains_key(UPGRADE)
}

/// Puts an [`InFlightSlot`] that holds nothing in the extensions of `req`, let through by an
/// in-flight layer without taking a slot (an allow-listed or skipped request, a key of none,
/// a cost of 0, a dry run over the limit), when it may switch protocols and carries no slot
/// yet: a handler that keeps the slot finds one, as it does where the layer counts.
pub(crate) fn pass_without_slot<B>(req: &mut Request<B>) {
    if may_upgrade(req) && req.extensions().get::<InFlightSlot>().is_none() {
        req.extensions_mut().insert(InFlightSlot::new(None, None));
    }
}

impl Held {
    /// What `req`, let through with `hold`, holds: shared with its handler through an
    /// [`InFlightSlot`] in its extensions when it may switch protocols, else alone (nothing
    /// allocated). The slot of an in-flight layer outside this one, found in the extensions,
    /// is chained to this one's.
    pub(crate) fn of<B>(hold: Hold, req: &mut Request<B>) -> Self {
        if !may_upgrade(req) {
            return Self::Alone(hold);
        }
        let connect = req.method() == Method::CONNECT;
        let extensions = req.extensions_mut();
        let slot = InFlightSlot::new(Some(hold), extensions.remove::<InFlightSlot>());
        extensions.insert(slot.clone());
        Self::Shared(Shared {
            slot: Some(slot),
            connect,
        })
    }

    /// What the response of status `status` holds: the slot until its body ends; or, when it
    /// switches protocols and someone kept a clone of the request's [`InFlightSlot`], nothing
    /// (the clones hold the slot). `Err` when it switches protocols with the slot kept by no
    /// one: its [`Unkept::answer`] replaces it.
    pub(crate) fn answered(self, status: StatusCode) -> Result<Option<Self>, Unkept> {
        let connect = matches!(&self, Self::Shared(shared) if shared.connect);
        let switches =
            status == StatusCode::SWITCHING_PROTOCOLS || (connect && status.is_success());
        if !switches {
            return Ok(Some(self));
        }
        let policy = match self {
            // A request no server upgrades: its slot is in nobody's hands.
            Self::Alone(hold) => hold.policy().to_owned(),
            Self::Shared(mut shared) => match shared.slot.take() {
                // The response's own clone is counted here: any other is the handler's.
                Some(slot) if Arc::strong_count(&slot.cell) > 1 => return Ok(None),
                slot => slot.map(|slot| slot.policy()).unwrap_or_default(),
            },
        };
        Err(Unkept { policy })
    }
}

/// What a response that switched protocols with its slot kept by no one is replaced with.
const UNKEPT: &str = "The server switched protocols without holding the in-flight slot of the \
    connection: the handler must keep the request's tollgate::InFlightSlot for the upgraded \
    connection's life (move it into the task that serves the connection), or the route must be \
    skipped by the in-flight layer.";

/// A response that switched protocols while no one kept the request's [`InFlightSlot`].
#[derive(Debug)]
pub(crate) struct Unkept {
    policy: String,
}

impl Unkept {
    /// In a dry run, the response goes out as it is and the connection goes uncounted: only
    /// logged, as the refusal is.
    pub(crate) fn let_through(self) {
        log_unkept(
            &self.policy,
            "dry run: an upgrade would have been refused (500)",
        );
    }

    /// The layer's answer instead: `500`, with a body that says how to fix the server.
    pub(crate) fn answer(self) -> Response<Bytes> {
        log_unkept(&self.policy, "upgrade refused (500)");
        let status = StatusCode::INTERNAL_SERVER_ERROR;
        own_answer(status, None, "", UNKEPT.as_bytes())
    }
}

/// Logs a refused upgrade: at error level the first time in this process (a misconfigured
/// server refuses every upgrade alike), then at debug level.
fn log_unkept(policy: &str, refused: &str) {
    static SEEN: AtomicBool = AtomicBool::new(false);
    let first = !SEEN.swap(true, Ordering::Relaxed);
    #[cfg(feature = "tracing")]
    if first {
        tracing::error!(policy, "in-flight limit: {refused}. {UNKEPT}");
    } else {
        tracing::debug!(policy, "in-flight limit: {refused}: no InFlightSlot kept");
    }
    #[cfg(not(feature = "tracing"))]
    if first {
        eprintln!("in-flight limit {policy:?}: {refused}. {UNKEPT}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::limiter::in_flight::{InFlight, DEFAULT_LEASE_TTL};
    use crate::limiter::{DecisionFuture, Limiter};
    use crate::store::in_flight::sealed::KeepsSlots;
    use crate::store::MemoryStore;
    use crate::{Decision, Key};
    use http::header::CACHE_CONTROL;

    fn limiter(slots: u64) -> Arc<dyn Limiter> {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new());
        let store = MemoryStore::new().slots("in-flight", slots, DEFAULT_LEASE_TTL, clock.clone());
        Arc::new(InFlight::new(store.unwrap(), slots, "in-flight", clock))
    }

    fn decided(check: DecisionFuture) -> Decision {
        match check {
            DecisionFuture::Ready(Some(Ok(decision))) => decision,
            _ => panic!("a memory store decides at once"),
        }
    }

    /// The slot of `key` taken for a request, if one was free.
    fn take(limiter: &Arc<dyn Limiter>, key: &str) -> Option<Hold> {
        let decision = decided(limiter.check(Key::from(key), 0, 1));
        Hold::of(limiter, Key::from(key), 1, &decision)
    }

    fn free(limiter: &Arc<dyn Limiter>, key: &str) -> u64 {
        decided(limiter.peek(Key::from(key))).remaining
    }

    fn upgrade() -> Request<()> {
        Request::get("/ws")
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .body(())
            .unwrap()
    }

    fn slot_of(req: &Request<()>) -> InFlightSlot {
        req.extensions().get::<InFlightSlot>().unwrap().clone()
    }

    #[test]
    fn only_a_request_that_may_switch_protocols_shares_its_slot() {
        let limiter = limiter(4);
        let mut plain = Request::get("/").body(()).unwrap();
        let held = Held::of(take(&limiter, "k").unwrap(), &mut plain);
        assert!(matches!(held, Held::Alone(_)));
        assert!(plain.extensions().get::<InFlightSlot>().is_none());
        for mut req in [
            upgrade(),
            // An `Upgrade` field alone (hyper needs no `Connection: upgrade`), or HTTP/1.0.
            Request::get("/").header("upgrade", "h2c").body(()).unwrap(),
            Request::get("/")
                .version(http::Version::HTTP_10)
                .header("upgrade", "websocket")
                .body(())
                .unwrap(),
            Request::connect("example.com:443").body(()).unwrap(),
        ] {
            let held = Held::of(take(&limiter, "u").unwrap(), &mut req);
            assert!(matches!(held, Held::Shared(_)));
            assert!(slot_of(&req).is_held());
        }
    }

    #[test]
    fn after_a_101_the_slot_is_held_until_the_last_clone_is_dropped() {
        let limiter = limiter(2);
        let mut req = upgrade();
        let held = Held::of(take(&limiter, "k").unwrap(), &mut req);
        let slot = slot_of(&req);
        drop(req);
        let clones: Vec<InFlightSlot> = (0..10).map(|_| slot.clone()).collect();
        drop(slot);
        assert_eq!(free(&limiter, "k"), 1);
        let kept = held.answered(StatusCode::SWITCHING_PROTOCOLS).unwrap();
        assert!(kept.is_none());
        // Many clones are one slot, held until the last goes.
        assert_eq!(free(&limiter, "k"), 1);
        let mut clones = clones.into_iter();
        let last = clones.next_back().unwrap();
        drop(clones);
        assert_eq!(free(&limiter, "k"), 1);
        drop(last);
        assert_eq!(free(&limiter, "k"), 2);
    }

    #[test]
    fn a_2xx_to_connect_switches_and_a_2xx_to_get_does_not() {
        let limiter = limiter(2);
        let mut req = Request::connect("/").body(()).unwrap();
        let held = Held::of(take(&limiter, "k").unwrap(), &mut req);
        let slot = slot_of(&req);
        drop(req);
        assert!(held.answered(StatusCode::OK).unwrap().is_none());
        assert_eq!(free(&limiter, "k"), 1);
        drop(slot);
        assert_eq!(free(&limiter, "k"), 2);
        // A 200 to a GET that carried `Upgrade` is a plain response.
        let mut req = upgrade();
        let held = Held::of(take(&limiter, "k").unwrap(), &mut req);
        let _slot = slot_of(&req);
        let held = held.answered(StatusCode::OK).unwrap();
        assert!(held.is_some());
        assert_eq!(free(&limiter, "k"), 1);
    }

    #[test]
    fn a_response_that_does_not_switch_gives_the_slot_back_whatever_clones_are_left() {
        let limiter = limiter(2);
        let mut req = upgrade();
        let held = Held::of(take(&limiter, "k").unwrap(), &mut req);
        let leaked = slot_of(&req);
        let body = held.answered(StatusCode::BAD_REQUEST).unwrap();
        assert_eq!(free(&limiter, "k"), 1);
        // The body ends.
        drop(body);
        assert_eq!(free(&limiter, "k"), 2);
        assert!(!leaked.is_held());
        // A clone dropped later gives nothing back twice.
        drop(leaked);
        drop(req);
        assert_eq!(free(&limiter, "k"), 2);
    }

    #[test]
    fn a_switch_with_the_slot_kept_by_no_one_is_refused_and_holds_nothing() {
        let limiter = limiter(2);
        let mut req = upgrade();
        let held = Held::of(take(&limiter, "k").unwrap(), &mut req);
        drop(req);
        let refusal = held
            .answered(StatusCode::SWITCHING_PROTOCOLS)
            .unwrap_err()
            .answer();
        assert_eq!(refusal.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(refusal.headers()[CACHE_CONTROL], "no-store");
        assert!(std::str::from_utf8(refusal.body())
            .unwrap()
            .contains("InFlightSlot"));
        assert_eq!(free(&limiter, "k"), 2);
        // A 101 to a request that asked for no upgrade: nobody can hold its slot.
        let mut plain = Request::get("/").body(()).unwrap();
        let held = Held::of(take(&limiter, "k").unwrap(), &mut plain);
        assert!(held.answered(StatusCode::SWITCHING_PROTOCOLS).is_err());
        assert_eq!(free(&limiter, "k"), 2);
    }

    #[test]
    fn stacked_layers_chain_their_slots() {
        let (outer, inner) = (limiter(1), limiter(2));
        let mut req = upgrade();
        let outer_held = Held::of(take(&outer, "k").unwrap(), &mut req);
        let inner_held = Held::of(take(&inner, "k").unwrap(), &mut req);
        // The handler keeps the one slot it finds.
        let slot = slot_of(&req);
        drop(req);
        assert!(inner_held
            .answered(StatusCode::SWITCHING_PROTOCOLS)
            .unwrap()
            .is_none());
        assert!(outer_held
            .answered(StatusCode::SWITCHING_PROTOCOLS)
            .unwrap()
            .is_none());
        assert_eq!((free(&outer, "k"), free(&inner, "k")), (0, 1));
        drop(slot);
        assert_eq!((free(&outer, "k"), free(&inner, "k")), (1, 2));
    }
}
