//! The fault proxy's self-test: with no rule it is transparent (commands,
//! pipelines, transactions, pub/sub, inline commands); each action has the
//! effect on Redis and the client that it promises; occurrences count the
//! way they say; a command after another is matched on that connection
//! only; replies stay paired with their commands in RESP3 too, pushes
//! included; `reset_all` and dropping the proxy close what is open.
//!
//! Server-side effects are read on a direct connection to Redis. Where a
//! test expects silence it listens for [`SILENCE`]: the proxy guarantees the
//! silence, so that wait is no race.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, RedisResult};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use tokio::time::timeout;

use crate::support::fault_proxy::{Action, FaultProxy, Match, Occurrence, Rule};
use crate::support::{Backend, RedisServer, wait_for};

/// A bound for anything that must happen on loopback; not a speed claim.
const BOUND: Duration = Duration::from_secs(5);

/// How long a test listens to show that nothing comes.
const SILENCE: Duration = Duration::from_millis(300);

const DELAY: Duration = Duration::from_millis(300);

async fn started() -> (RedisServer, FaultProxy) {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(redis.port()).await;
    (redis, proxy)
}

/// A client through the proxy, without redis-rs's own response timeout:
/// each test bounds its calls itself.
async fn connect(proxy: &FaultProxy) -> MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    redis::Client::open(proxy.url())
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

async fn within<F: Future>(what: &str, f: F) -> F::Output {
    timeout(BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("no outcome within {BOUND:?}: {what}"))
}

/// `key` read directly from Redis.
async fn get(redis: &RedisServer, key: &str) -> Option<String> {
    redis.cmd(&["GET", key]).await
}

fn arg_rule(command: &str, arg: &str, occurrence: Occurrence, action: Action) -> Rule {
    Rule::new(
        Match::CommandArg(command.into(), arg.into()),
        occurrence,
        action,
    )
}

fn is_error_with(r: &RedisResult<impl std::fmt::Debug>, text: &str) -> bool {
    matches!(r, Err(e) if e.to_string().contains(text))
}

#[tokio::test]
async fn without_rules_commands_pipelines_transactions_and_pubsub_pass() {
    let (redis, proxy) = started().await;
    let mut con = connect(&proxy).await;

    let () = within("set", con.set("k", "v")).await.unwrap();
    let v: String = within("get", con.get("k")).await.unwrap();
    assert_eq!(v, "v");

    let (a, missing, n): (String, Option<String>, i64) = within(
        "a pipeline",
        redis::pipe()
            .set("a", "1")
            .ignore()
            .get("a")
            .get("missing")
            .incr("n", 2)
            .query_async(&mut con),
    )
    .await
    .unwrap();
    assert_eq!((a.as_str(), missing, n), ("1", None, 2));

    let (t, all): (i64, HashMap<String, String>) = within(
        "a transaction",
        redis::pipe()
            .atomic()
            .hset("h", "f", "x")
            .ignore()
            .incr("t", 5)
            .hgetall("h")
            .query_async(&mut con),
    )
    .await
    .unwrap();
    assert_eq!(t, 5);
    assert_eq!(all["f"], "x");
    assert_eq!(proxy.commands("exec"), 1);

    // Subscribed through the proxy, published directly.
    let mut pubsub = redis::Client::open(proxy.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    within("subscribe", pubsub.subscribe("news")).await.unwrap();
    wait_for("redis sees the subscriber", BOUND, || async {
        let (_, subscribers): (String, i64) = redis.cmd(&["PUBSUB", "NUMSUB", "news"]).await;
        subscribers == 1
    })
    .await;
    let receivers: i64 = redis.cmd(&["PUBLISH", "news", "hello"]).await;
    assert_eq!(receivers, 1);
    let message = within("the message", pubsub.on_message().next())
        .await
        .expect("a message");
    assert_eq!(message.get_payload::<String>().unwrap(), "hello");
    assert_eq!(proxy.commands("SUBSCRIBE"), 1);

    // Inline commands, as redis-cli may send them.
    let mut raw = Raw::connect(&proxy).await;
    raw.write(b"SET inline 1\r\nGET inline\r\n").await;
    assert_eq!(raw.read().await, Resp::Line(b'+', "OK".into()));
    assert_eq!(raw.read().await, Resp::Blob(b'$', b"1".to_vec()));
    assert!(proxy.journal().is_empty());
}

#[tokio::test]
async fn a_dropped_reply_leaves_the_write_applied_and_the_connection_silent() {
    let (redis, proxy) = started().await;
    let rule = proxy.add(arg_rule("SET", "k", Occurrence::Nth(1), Action::DropReply));
    let mut con = connect(&proxy).await;

    let set = timeout(SILENCE, con.set::<_, _, ()>("k", "v")).await;
    assert!(set.is_err(), "the reply was dropped, yet: {set:?}");
    assert!(rule.wait_fired(1, BOUND).await);
    assert_eq!(get(&redis, "k").await.as_deref(), Some("v"));

    let later = timeout(SILENCE, con.get::<_, Option<String>>("k")).await;
    assert!(
        later.is_err(),
        "the connection swallows every reply: {later:?}"
    );

    let mut fresh = connect(&proxy).await;
    let v: Option<String> = within("get on a new connection", fresh.get("k"))
        .await
        .unwrap();
    assert_eq!(v.as_deref(), Some("v"));
    let journal = proxy.journal();
    assert_eq!(journal.len(), 1, "{journal:?}");
    assert!(journal[0].ends_with(": SET k -> drop reply"), "{journal:?}");
}

#[tokio::test]
async fn a_reset_before_the_command_leaves_it_unapplied() {
    let (redis, proxy) = started().await;
    let rule = proxy.add(arg_rule(
        "SET",
        "k",
        Occurrence::Nth(1),
        Action::ResetBefore,
    ));
    let mut con = connect(&proxy).await;

    let set: RedisResult<()> = within("set", con.set("k", "v")).await;
    assert!(set.is_err(), "{set:?}");
    assert_eq!(rule.fired(), 1);
    assert_eq!(get(&redis, "k").await, None);
    assert_eq!(proxy.commands("SET"), 0);
}

#[tokio::test]
async fn a_reset_after_the_command_leaves_it_applied() {
    let (redis, proxy) = started().await;
    let rule = proxy.add(arg_rule("SET", "k", Occurrence::Nth(1), Action::ResetAfter));
    let mut con = connect(&proxy).await;

    let set: RedisResult<()> = within("set", con.set("k", "v")).await;
    assert!(set.is_err(), "{set:?}");
    assert_eq!(rule.fired(), 1);
    assert_eq!(get(&redis, "k").await.as_deref(), Some("v"));
    assert_eq!(proxy.commands("SET"), 1);
}

#[tokio::test]
async fn a_delayed_command_is_applied_late_and_later_ones_queue_behind_it() {
    let (redis, proxy) = started().await;
    let rule = proxy.add(arg_rule(
        "SET",
        "k",
        Occurrence::Every,
        Action::Delay(DELAY),
    ));
    let mut con = connect(&proxy).await;
    let mut behind = con.clone();

    let start = Instant::now();
    let (set, read) = tokio::join!(
        within("the delayed set", async {
            let r: RedisResult<()> = con.set("k", "v").await;
            (r, start.elapsed())
        }),
        within("the get behind it", async {
            let r: RedisResult<Option<String>> = behind.get("k").await;
            (r, start.elapsed())
        }),
    );
    set.0.unwrap();
    assert!(set.1 >= DELAY, "the set answered after {:?}", set.1);
    // Sent after the set on the same connection, so it reads the set's value.
    assert_eq!(read.0.unwrap().as_deref(), Some("v"));
    assert!(read.1 >= DELAY, "the get answered after {:?}", read.1);
    assert_eq!(rule.fired(), 1);
    assert_eq!(get(&redis, "k").await.as_deref(), Some("v"));
}

#[tokio::test]
async fn a_delayed_command_is_taken_as_it_arrives_and_fired_once_forwarded() {
    // Long enough that nothing else on loopback takes as long.
    const HELD: Duration = Duration::from_secs(1);
    let (redis, proxy) = started().await;
    let rule = proxy.add(arg_rule(
        "SET",
        "k",
        Occurrence::Next(1),
        Action::Delay(HELD),
    ));
    let mut con = connect(&proxy).await;
    let set = tokio::spawn(async move {
        let r: RedisResult<()> = con.set("k", "v").await;
        r
    });
    assert!(rule.wait_taken(1, BOUND).await);
    // Held in the proxy: not in Redis, not fired.
    assert_eq!(get(&redis, "k").await, None);
    assert_eq!(rule.fired(), 0);
    within("the delayed set", set).await.unwrap().unwrap();
    assert_eq!(rule.fired(), 1);
    assert_eq!(get(&redis, "k").await.as_deref(), Some("v"));
    assert!(!rule.wait_taken(2, SILENCE).await);
}

#[tokio::test]
async fn an_injected_error_takes_one_commands_place_in_a_pipeline() {
    let (redis, proxy) = started().await;
    let _: i64 = redis.cmd(&["HSET", "h1", "f", "1"]).await;
    let _: i64 = redis.cmd(&["HSET", "h2", "f", "2"]).await;
    let rule = proxy.add(arg_rule(
        "HGETALL",
        "h1",
        Occurrence::Every,
        Action::Error("ERR injected".into()),
    ));
    let mut con = connect(&proxy).await;

    let results: Vec<RedisResult<HashMap<String, String>>> = within(
        "the pipeline",
        redis::pipe()
            .hgetall("h1")
            .hgetall("h2")
            .ignore_errors()
            .query_async(&mut con),
    )
    .await
    .unwrap();
    assert!(is_error_with(&results[0], "injected"), "{results:?}");
    assert_eq!(results[1].as_ref().unwrap()["f"], "2");

    // The connection goes on.
    let h2: HashMap<String, String> = within("hgetall h2", con.hgetall("h2")).await.unwrap();
    assert_eq!(h2["f"], "2");
    let h1: RedisResult<HashMap<String, String>> = within("hgetall h1", con.hgetall("h1")).await;
    assert!(is_error_with(&h1, "injected"), "{h1:?}");
    assert_eq!(rule.fired(), 2);
    assert_eq!(proxy.commands("HGETALL"), 2);
}

#[tokio::test]
async fn a_script_is_matched_by_its_sha_in_both_forms_and_occurrences_count() {
    const BODY: &str = "return redis.call('INCR', KEYS[1])";
    let (redis, proxy) = started().await;
    let script = redis::Script::new(BODY);
    let sha = script.get_hash().to_string();
    let mut con = connect(&proxy).await;

    // Every: by its SHA (upper-case here) or by its body, read-only forms too.
    let every = proxy.add(Rule::new(
        Match::Script(sha.to_uppercase()),
        Occurrence::Every,
        Action::Error("ERR caught".into()),
    ));
    for (command, target) in [
        ("EVALSHA", sha.as_str()),
        ("EVALSHA_RO", &sha),
        ("EVAL", BODY),
        ("EVAL_RO", BODY),
    ] {
        let r: RedisResult<i64> = within(
            command,
            redis::cmd(command)
                .arg(target)
                .arg(1)
                .arg("n")
                .query_async(&mut con),
        )
        .await;
        assert!(is_error_with(&r, "caught"), "{command}: {r:?}");
    }
    let other: i64 = within(
        "another script",
        redis::cmd("EVAL")
            .arg("return 7")
            .arg(0)
            .query_async(&mut con),
    )
    .await
    .unwrap();
    assert_eq!(other, 7);
    assert_eq!(every.fired(), 4);
    assert!(every.wait_fired(4, BOUND).await);
    assert!(!every.wait_fired(5, SILENCE).await);
    every.remove();
    let journal = proxy.journal();
    assert!(
        journal.iter().all(|l| !l.contains(BODY)),
        "a script body is cut to 40 bytes: {journal:?}"
    );

    // Nth(2): after a flush, redis-rs sends EVALSHA (NOSCRIPT), loads the
    // script, and sends EVALSHA again; that retry is the second match.
    let () = redis.cmd(&["SCRIPT", "FLUSH"]).await;
    let second = proxy.add(Rule::new(
        Match::Script(sha.clone()),
        Occurrence::Nth(2),
        Action::Error("ERR second".into()),
    ));
    let first: RedisResult<i64> =
        within("first call", script.key("n").invoke_async(&mut con)).await;
    assert!(is_error_with(&first, "second"), "{first:?}");
    assert_eq!(proxy.commands("SCRIPT"), 1);
    let next: i64 = within("second call", script.key("n").invoke_async(&mut con))
        .await
        .unwrap();
    assert_eq!(next, 1, "nothing incremented n before");
    assert_eq!(second.fired(), 1);
    second.remove();

    // Next(2): two calls, then no more.
    let two = proxy.add(Rule::new(
        Match::Script(sha.clone()),
        Occurrence::Next(2),
        Action::Error("ERR next".into()),
    ));
    for call in 1..=2 {
        let r: RedisResult<i64> =
            within("a caught call", script.key("n").invoke_async(&mut con)).await;
        assert!(is_error_with(&r, "next"), "call {call}: {r:?}");
    }
    let third: i64 = within("third call", script.key("n").invoke_async(&mut con))
        .await
        .unwrap();
    assert_eq!(third, 2);
    assert!(two.wait_fired(2, BOUND).await);
    assert_eq!(two.fired(), 2);
}

#[tokio::test]
async fn a_command_after_another_is_matched_on_that_connection_only() {
    let (redis, proxy) = started().await;
    let rule = proxy.add(Rule::new(
        Match::After(
            Box::new(Match::Command("INCR".into())),
            Box::new(Match::Command("GET".into())),
        ),
        Occurrence::Every,
        Action::Error("ERR after".into()),
    ));
    let mut a = connect(&proxy).await;
    let b = connect(&proxy).await;
    let incr = |con: &MultiplexedConnection| {
        let mut con = con.clone();
        async move {
            let n: i64 = within("incr", redis::cmd("INCR").arg("n").query_async(&mut con))
                .await
                .unwrap();
            n
        }
    };
    let read = |con: &MultiplexedConnection| {
        let mut con = con.clone();
        async move { within("get", con.get::<_, Option<String>>("n")).await }
    };

    // No INCR yet: GETs pass.
    assert!(read(&a).await.is_ok());
    // An INCR on `a` arms `a` alone, for its next GET, past other commands.
    assert_eq!(incr(&a).await, 1);
    assert_eq!(read(&b).await.unwrap().as_deref(), Some("1"));
    let () = within("set", a.set("other", "x")).await.unwrap();
    let caught = read(&a).await;
    assert!(is_error_with(&caught, "after"), "{caught:?}");
    assert_eq!(read(&a).await.unwrap().as_deref(), Some("1"));
    // Two INCRs arm it once.
    for _ in 0..2 {
        incr(&a).await;
    }
    assert!(is_error_with(&read(&a).await, "after"));
    assert_eq!(read(&a).await.unwrap().as_deref(), Some("3"));
    assert_eq!(rule.fired(), 2);
    assert_eq!(get(&redis, "n").await.as_deref(), Some("3"));
}

#[tokio::test]
async fn a_reset_after_the_middle_of_a_pipeline_leaves_it_and_what_came_before_applied() {
    let (redis, proxy) = started().await;
    let rule = proxy.add(arg_rule("SET", "b", Occurrence::Nth(1), Action::ResetAfter));
    let mut con = connect(&proxy).await;

    let r: RedisResult<()> = within(
        "the pipeline",
        redis::pipe()
            .set("a", "1")
            .set("b", "2")
            .set("c", "3")
            .query_async(&mut con),
    )
    .await;
    assert!(r.is_err(), "{r:?}");
    assert_eq!(rule.fired(), 1);
    // Whether `c` was applied is unknown, as for a real client.
    assert_eq!(get(&redis, "a").await.as_deref(), Some("1"));
    assert_eq!(get(&redis, "b").await.as_deref(), Some("2"));
}

#[tokio::test]
async fn resp3_replies_and_pushes_stay_paired_with_their_commands() {
    let (redis, proxy) = started().await;
    let _: i64 = redis.cmd(&["HSET", "h", "f1", "v1", "f2", "v2"]).await;
    let slow = proxy.add(arg_rule(
        "SET",
        "k",
        Occurrence::Nth(1),
        Action::Delay(DELAY),
    ));
    let mut raw = Raw::connect(&proxy).await;

    let start = Instant::now();
    raw.send(&[
        &["HELLO", "3"],
        &["HGETALL", "h"],
        &["SET", "k", "v"],
        &["GET", "k"],
    ])
    .await;
    assert!(matches!(raw.read().await, Resp::Many(b'%', _)));
    let blob = |s: &str| Resp::Blob(b'$', s.as_bytes().to_vec());
    assert_eq!(
        raw.read().await,
        Resp::Many(b'%', vec![blob("f1"), blob("v1"), blob("f2"), blob("v2")])
    );
    assert_eq!(raw.read().await, Resp::Line(b'+', "OK".into()));
    assert!(start.elapsed() >= DELAY);
    assert_eq!(raw.read().await, blob("v"));
    assert_eq!(slow.fired(), 1);

    // A push comes while two replies are pending, one of them to be dropped:
    // it takes neither's place.
    let dropped = proxy.add(Rule::new(
        Match::Command("PING".into()),
        Occurrence::Nth(1),
        Action::DropReply,
    ));
    raw.send(&[
        &["CLIENT", "TRACKING", "ON"],
        &["GET", "k"],
        &["BLPOP", "q", "0"],
        &["PING"],
    ])
    .await;
    assert_eq!(raw.read().await, Resp::Line(b'+', "OK".into()));
    assert_eq!(raw.read().await, blob("v"));
    let () = redis.cmd(&["SET", "k", "w"]).await;
    assert_eq!(
        raw.read().await,
        Resp::Many(
            b'>',
            vec![blob("invalidate"), Resp::Many(b'*', vec![blob("k")])]
        )
    );
    let _: i64 = redis.cmd(&["RPUSH", "q", "x"]).await;
    assert_eq!(
        raw.read().await,
        Resp::Many(b'*', vec![blob("q"), blob("x")])
    );
    assert!(dropped.wait_fired(1, BOUND).await);
    assert_eq!(raw.read_within(SILENCE).await, None, "the PONG was dropped");
}

#[tokio::test]
async fn replies_of_every_resp3_type_pair_when_frames_arrive_in_pieces() {
    let (_redis, proxy) = started().await;
    let injected = proxy.add(Rule::new(
        Match::Command("PING".into()),
        Occurrence::Every,
        Action::Error("ERR injected".into()),
    ));
    let mut raw = Raw::connect(&proxy).await;
    let big = "x".repeat(1 << 20);
    let eval = |body: &'static str| ["EVAL", body, "0"];
    let double = eval("redis.setresp(3); return {double=1.5}");
    let boolean = eval("redis.setresp(3); return true");
    let bignum = eval("redis.setresp(3); return {big_number='12345678901234567890'}");
    let verbatim = eval("redis.setresp(3); return {verbatim_string={format='txt', string='hi'}}");
    let nested = eval("redis.setresp(3); return {map={a={1,{2,3}}}}");
    let set = eval("redis.setresp(3); return {set={x=true}}");
    let error = eval("return redis.error_reply('ERR mine')");
    let commands: [&[&str]; 13] = [
        &["HELLO", "3"],
        &["SET", "big", &big],
        &["GET", "big"],
        &double,
        &boolean,
        &bignum,
        &verbatim,
        &nested,
        &set,
        &error,
        &["LPOS", "missing", "x"],
        &["PING"],
        &["ECHO", "done"],
    ];
    // Small pieces, each read by the proxy before the next is written (the
    // runtime is single-threaded and the writer yields), so that commands
    // span reads; the 1 MiB reply spans the proxy's reads from Redis.
    for command in commands {
        let bytes = resp(&[command]);
        let piece = if bytes.len() > 5000 { 5000 } else { 3 };
        for bit in bytes.chunks(piece) {
            raw.write(bit).await;
            tokio::task::yield_now().await;
        }
    }
    let blob = |s: &str| Resp::Blob(b'$', s.as_bytes().to_vec());
    let int = |i: i64| Resp::Line(b':', i.to_string());
    assert!(matches!(raw.read().await, Resp::Many(b'%', _)));
    assert_eq!(raw.read().await, Resp::Line(b'+', "OK".into()));
    assert_eq!(raw.read().await, blob(&big));
    assert_eq!(raw.read().await, Resp::Line(b',', "1.5".into()));
    assert_eq!(raw.read().await, Resp::Line(b'#', "t".into()));
    assert_eq!(
        raw.read().await,
        Resp::Line(b'(', "12345678901234567890".into())
    );
    assert_eq!(raw.read().await, Resp::Blob(b'=', b"txt:hi".to_vec()));
    assert_eq!(
        raw.read().await,
        Resp::Many(
            b'%',
            vec![
                blob("a"),
                Resp::Many(b'*', vec![int(1), Resp::Many(b'*', vec![int(2), int(3)])])
            ]
        )
    );
    assert_eq!(raw.read().await, Resp::Many(b'~', vec![blob("x")]));
    assert_eq!(raw.read().await, Resp::Line(b'-', "ERR mine".into()));
    assert_eq!(raw.read().await, Resp::Null);
    assert_eq!(raw.read().await, Resp::Line(b'-', "ERR injected".into()));
    assert_eq!(raw.read().await, blob("done"));
    assert_eq!(injected.fired(), 1);
    assert_eq!(proxy.commands("EVAL"), 7);
}

#[tokio::test]
async fn reset_all_breaks_every_open_connection_and_new_ones_work() {
    let (_redis, proxy) = started().await;
    let mut a = connect(&proxy).await;
    let mut b = connect(&proxy).await;
    let mut raw = Raw::connect(&proxy).await;
    let () = within("set", a.set("k", "v")).await.unwrap();
    let _: Option<String> = within("get", b.get("k")).await.unwrap();
    raw.send(&[&["PING"]]).await;
    assert_eq!(raw.read().await, Resp::Line(b'+', "PONG".into()));

    proxy.reset_all();
    assert!(proxy.wait_reset(BOUND).await);
    let read = raw.read_bytes().await;
    assert!(
        matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{read:?}"
    );
    let after_a: RedisResult<Option<String>> = within("get on a", a.get("k")).await;
    assert!(after_a.is_err(), "{after_a:?}");
    let after_b: RedisResult<Option<String>> = within("get on b", b.get("k")).await;
    assert!(after_b.is_err(), "{after_b:?}");

    let mut fresh = connect(&proxy).await;
    let v: Option<String> = within("get on a new connection", fresh.get("k"))
        .await
        .unwrap();
    assert_eq!(v.as_deref(), Some("v"));

    // Dropping the proxy closes what is still open.
    let mut last = Raw::connect(&proxy).await;
    last.send(&[&["PING"]]).await;
    assert_eq!(last.read().await, Resp::Line(b'+', "PONG".into()));
    drop(proxy);
    let read = within("the close", last.read_bytes()).await;
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
}

/// A RESP value as these tests look at it: its type byte and its parts.
#[derive(Debug, PartialEq)]
enum Resp {
    Line(u8, String),
    Blob(u8, Vec<u8>),
    Many(u8, Vec<Resp>),
    Null,
}

/// The first value in `buf` and its length, once complete. Minimal on
/// purpose: it shares nothing with the proxy's parser.
fn parse(buf: &[u8]) -> Option<(Resp, usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    let kind = buf[0];
    let head = std::str::from_utf8(&buf[1..end]).unwrap();
    let mut at = end + 2;
    match kind {
        b'$' | b'=' | b'!' => {
            let Ok(n) = usize::try_from(head.parse::<i64>().unwrap()) else {
                return Some((Resp::Null, at));
            };
            let body = buf.get(at..at + n)?.to_vec();
            buf.get(at + n + 1)?;
            Some((Resp::Blob(kind, body), at + n + 2))
        }
        b'*' | b'~' | b'>' | b'%' => {
            let Ok(n) = usize::try_from(head.parse::<i64>().unwrap()) else {
                return Some((Resp::Null, at));
            };
            let n = if kind == b'%' { 2 * n } else { n };
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                let (item, used) = parse(&buf[at..])?;
                items.push(item);
                at += used;
            }
            Some((Resp::Many(kind, items), at))
        }
        b'_' => Some((Resp::Null, at)),
        _ => Some((Resp::Line(kind, head.to_string()), at)),
    }
}

/// `commands` as RESP arrays of bulk strings.
fn resp(commands: &[&[&str]]) -> Vec<u8> {
    let mut out = Vec::new();
    for args in commands {
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in *args {
            out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
    }
    out
}

/// A hand-driven connection through the proxy.
struct Raw {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    async fn connect(proxy: &FaultProxy) -> Raw {
        let stream = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        Raw {
            stream,
            buf: Vec::new(),
        }
    }

    async fn write(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// The commands as RESP arrays, in one write.
    async fn send(&mut self, commands: &[&[&str]]) {
        self.write(&resp(commands)).await;
    }

    async fn read(&mut self) -> Resp {
        within("a reply", self.next_value()).await
    }

    /// The next value if one comes within `limit`; cancel-safe, so a later
    /// read resumes where this one stopped.
    async fn read_within(&mut self, limit: Duration) -> Option<Resp> {
        timeout(limit, self.next_value()).await.ok()
    }

    async fn next_value(&mut self) -> Resp {
        loop {
            if let Some((value, used)) = parse(&self.buf) {
                self.buf.drain(..used);
                return value;
            }
            let n = self.read_bytes().await.unwrap();
            assert!(n > 0, "the proxy closed the connection");
        }
    }

    /// One read into the buffer: its length, 0 at end of stream.
    async fn read_bytes(&mut self) -> std::io::Result<usize> {
        self.buf.reserve(4096);
        self.stream.read_buf(&mut self.buf).await
    }
}
