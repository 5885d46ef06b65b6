//! The Redis version the store needs: a real `redis-server` (7.x here) is accepted; a server
//! that says it runs Redis 4 (a stand-in speaking the protocol on loopback, since Redis 4 is
//! not installed) is refused at connect with a message naming its version and the minimum.
//! The servers the tests start say which they are: with `TOLLGATE_EXPECT_SERVER=valkey` (or
//! `redis`), set by CI's run on each, a server or sentinel of another kind fails, so a PATH
//! that still finds the other server cannot pass for it.

use crate::support::redis as server;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tollgate::store::RedisStore;
use tollgate::{Quota, RateLimiter};

/// A stand-in server on loopback that answers `INFO` with `info` and every other command with
/// `+OK`. Returns its URL.
async fn stand_in(info: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut lines = BufReader::new(read);
                loop {
                    // A command: `*<n>`, then `$<len>` and the argument, n times.
                    let mut header = String::new();
                    if lines.read_line(&mut header).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let Some(n) = header.trim().strip_prefix('*').and_then(|n| n.parse().ok())
                    else {
                        return;
                    };
                    let mut args = Vec::new();
                    for _ in 0..n {
                        let mut len = String::new();
                        let mut arg = String::new();
                        lines.read_line(&mut len).await.unwrap();
                        lines.read_line(&mut arg).await.unwrap();
                        args.push(arg.trim_end().to_ascii_uppercase());
                    }
                    let reply = if args.first().is_some_and(|a| a == "INFO") {
                        format!("${}\r\n{info}\r\n", info.len())
                    } else {
                        "+OK\r\n".to_owned()
                    };
                    if write.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

async fn a_redis_older_than_5_is_refused_at_connect_naming_both_versions() {
    let url = stand_in("# Server\r\nredis_version:4.0.14\r\nredis_mode:standalone\r\n").await;
    let error = match RedisStore::connect(&url).await {
        Ok(_) => panic!("a Redis 4 server was accepted"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("runs Redis 4.0.14"), "{error}");
    assert!(error.contains("needs Redis 5.0.0 or newer"), "{error}");
    assert!(error.contains("upgrade the Redis server"), "{error}");
}

async fn a_server_of_the_minimum_version_is_accepted() {
    let url = stand_in("# Server\r\nredis_version:5.0.0\r\n").await;
    assert!(RedisStore::connect(&url).await.is_ok());
}

async fn the_installed_redis_server_is_accepted_and_decides() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let info = server.info("server");
    assert!(info.contains("redis_version:"), "{info}");
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let limiter = RateLimiter::gcra(Quota::per_minute(1).named("v")).with_store(store);
    assert!(limiter.check("k").await.unwrap().allowed);
    assert!(!limiter.check("k").await.unwrap().allowed);
}

/// `field` of an `INFO` reply, when present.
fn field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// Which server answered `INFO server`, and its version: Valkey names itself
/// (`server_name:valkey`, `valkey_version`); Redis does not.
fn server_of(info: &str) -> (String, String) {
    match field(info, "server_name") {
        Some(name) => {
            let version = field(info, &format!("{name}_version"));
            (name.to_owned(), version.unwrap_or("?").to_owned())
        }
        None => (
            "redis".to_owned(),
            field(info, "redis_version").unwrap_or("?").to_owned(),
        ),
    }
}

fn the_servers_started_are_the_ones_expected() {
    let Some(stale) = server::StaleSentinel::start() else {
        return;
    };
    let expected = std::env::var("TOLLGATE_EXPECT_SERVER").ok();
    for (what, port) in [
        ("redis-server", stale.server.port),
        ("redis-sentinel", stale.sentinel.port),
    ] {
        let info = server::command(port, "INFO server").unwrap_or_default();
        let (name, version) = server_of(&info);
        println!("{what} runs {name} {version}");
        if let Some(expected) = &expected {
            assert_eq!(
                &name, expected,
                "TOLLGATE_EXPECT_SERVER: {what} runs {name}"
            );
        }
    }
    let sentinel = server::command(stale.sentinel.port, "INFO server").unwrap_or_default();
    // Valkey says `server_mode`, Redis `redis_mode`.
    let mode = field(&sentinel, "server_mode").or(field(&sentinel, "redis_mode"));
    assert_eq!(mode, Some("sentinel"), "{sentinel}");
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::plain_async(
            "a_redis_older_than_5_is_refused_at_connect_naming_both_versions",
            a_redis_older_than_5_is_refused_at_connect_naming_both_versions,
        ),
        server::plain_async(
            "a_server_of_the_minimum_version_is_accepted",
            a_server_of_the_minimum_version_is_accepted,
        ),
        server::needs_redis_async(
            "the_installed_redis_server_is_accepted_and_decides",
            the_installed_redis_server_is_accepted_and_decides,
        ),
        server::needs_redis(
            "the_servers_started_are_the_ones_expected",
            the_servers_started_are_the_ones_expected,
        ),
    ]
}
