//! Limits on requests in flight: under any mix of requests that complete, are cancelled before
//! their response, drop their bodies, stream their bodies to the end or panic, the slots held
//! are exactly the requests live, never more than the limit, and all come back.

use crate::support::in_flight as held;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use proptest::prelude::*;
use tokio::sync::oneshot;
use tollgate::key::Header;
use tollgate::InFlightLayer;
use tower::{Layer, ServiceExt};

use held::{Control, Controls, Fate};

/// Keeps the handlers' deliberate panics out of the test output.
fn quiet_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let on_purpose = info
                .payload()
                .downcast_ref::<&str>()
                .is_some_and(|m| m.contains("on purpose"));
            if !on_purpose {
                default(info);
            }
        }));
    });
}

async fn settle() {
    for _ in 0..64 {
        tokio::task::yield_now().await;
    }
}

/// A request of the one key, and what the test knows of it.
struct Outstanding {
    fate: Fate,
    control: Control,
    task: tokio::task::JoinHandle<()>,
    /// A streaming request whose response has begun.
    streaming: bool,
}

/// What a request's task reports once answered: the status, the requests live then, and
/// whether a `Retry-After` came.
type Report = (StatusCode, usize, bool);

type Svc = tower::util::BoxCloneService<
    Request<()>,
    http::Response<tollgate::layer::ResponseBody<held::TestBody>>,
    std::convert::Infallible,
>;

struct Bench {
    svc: Svc,
    controls: Controls,
    live: Arc<AtomicUsize>,
    next_id: u64,
}

impl Bench {
    /// Starts a request of `fate`: `Ok` when it was let through (its handler now holds it),
    /// `Err` with its report when it was refused.
    async fn start(&mut self, fate: Fate) -> Result<Outstanding, Report> {
        self.next_id += 1;
        let id = self.next_id;
        let control = self.controls.register(id);
        let req = Request::builder()
            .header("x-key", "k")
            .header("x-id", id.to_string())
            .body(())
            .unwrap();
        let (report, mut reported) = oneshot::channel::<Report>();
        let svc = self.svc.clone();
        let live = self.live.clone();
        let task = tokio::spawn(async move {
            let resp = svc.oneshot(req).await.unwrap();
            let status = resp.status();
            let retry = resp.headers().contains_key("retry-after");
            let _ = report.send((status, live.load(Ordering::SeqCst), retry));
            if status != StatusCode::OK || fate == Fate::DropBody {
                return;
            }
            let mut body = resp.into_body();
            while let Some(frame) = body.frame().await {
                frame.unwrap();
            }
        });
        settle().await;
        match reported.try_recv() {
            Ok(report) => Err(report),
            Err(_) => Ok(Outstanding {
                fate,
                control,
                task,
                streaming: false,
            }),
        }
    }

    /// The slots free now, as a peek (cost 0) reports them.
    async fn free(&self) -> u64 {
        let req = Request::builder()
            .header("x-key", "k")
            .header("x-peek", "1")
            .body(())
            .unwrap();
        let resp = self.svc.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let value = resp.headers()["ratelimit"].to_str().unwrap().to_owned();
        let r = value
            .strip_prefix("\"in-flight\";r=")
            .unwrap_or_else(|| panic!("{value}"));
        r.parse().unwrap()
    }
}

/// Moves `req` one step on: lets it go with its fate, or cancels it, or (a stream) sends a
/// chunk, then ends it. `true` when it is over.
async fn advance(req: &mut Outstanding) -> bool {
    match req.fate {
        Fate::Cancel => {
            req.task.abort();
            true
        }
        Fate::Stream if !req.streaming => {
            if let Some(fate) = req.control.fate.take() {
                fate.send(Fate::Stream).unwrap();
            }
            if let Some(chunks) = &req.control.chunks {
                chunks.send(Bytes::from_static(b"part")).unwrap();
            }
            req.streaming = true;
            false
        }
        Fate::Stream => {
            req.control.chunks = None;
            true
        }
        fate => {
            if let Some(tx) = req.control.fate.take() {
                tx.send(fate).unwrap();
            }
            true
        }
    }
}

fn bench(limit: u64) -> Bench {
    let controls = Controls::default();
    let live = Arc::new(AtomicUsize::new(0));
    let layer = InFlightLayer::new(limit)
        .key(Header::new("x-key"))
        .cost(|_key: &tollgate::Key, head| u64::from(!head.headers().contains_key("x-peek")));
    let svc = Svc::new(layer.layer(held::handler(controls.clone(), live.clone())));
    Bench {
        svc,
        controls,
        live,
        next_id: 0,
    }
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        Just(Fate::Complete),
        Just(Fate::Cancel),
        Just(Fate::DropBody),
        Just(Fate::Stream),
        Just(Fate::Panic),
    ]
}

async fn slots_follow_live_requests(limit: u64, ops: Vec<(bool, Fate, usize)>) {
    let mut bench = bench(limit);
    let mut outstanding: Vec<Outstanding> = Vec::new();
    let check = |bench: &Bench, outstanding: &[Outstanding]| {
        let live = bench.live.load(Ordering::SeqCst);
        assert!(
            live as u64 <= limit,
            "{live} live over the limit of {limit}"
        );
        assert_eq!(live, outstanding.len(), "every request let through is live");
    };
    for (start, fate, pick) in ops {
        if start || outstanding.is_empty() {
            match bench.start(fate).await {
                Ok(req) => outstanding.push(req),
                Err((status, live_then, retry)) => {
                    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
                    assert_eq!(live_then as u64, limit, "refused while a slot was free");
                    assert!(!retry, "an in-flight denial names no wait");
                }
            }
        } else {
            let i = pick % outstanding.len();
            if advance(&mut outstanding[i]).await {
                outstanding.swap_remove(i);
            }
            settle().await;
        }
        check(&bench, &outstanding);
        assert_eq!(
            bench.free().await,
            limit - bench.live.load(Ordering::SeqCst) as u64,
            "the slots held are the requests live"
        );
    }
    // Everything ends; every slot is back, and `limit` requests can be in flight again.
    while let Some(mut req) = outstanding.pop() {
        while !advance(&mut req).await {}
        settle().await;
    }
    assert_eq!(bench.live.load(Ordering::SeqCst), 0);
    assert_eq!(bench.free().await, limit);
    let mut again = Vec::new();
    for _ in 0..limit {
        match bench.start(Fate::Complete).await {
            Ok(req) => again.push(req),
            Err(report) => panic!("refused with every slot back: {report:?}"),
        }
    }
    let refused = bench.start(Fate::Complete).await;
    assert!(matches!(
        refused,
        Err((StatusCode::TOO_MANY_REQUESTS, _, false))
    ));
    for mut req in again {
        advance(&mut req).await;
    }
    settle().await;
    assert_eq!(bench.free().await, limit);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn in_flight_never_exceeds_the_limit_and_every_slot_comes_back(
        limit in 1u64..=4,
        ops in prop::collection::vec((any::<bool>(), fate(), any::<usize>()), 1..48),
    ) {
        quiet_panics();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(slots_follow_live_requests(limit, ops));
    }
}
