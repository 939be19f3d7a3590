//! A RESP-aware Redis proxy on loopback that gives chosen commands an unknown
//! outcome: a reply that never comes back although the write was applied, a
//! connection reset before or after a command, a delay, an error in place of
//! a reply. Tests point a process's Redis URL at [`FaultProxy::url`] and add
//! [`Rule`]s while it runs.
//!
//! Guarantees:
//! - Rules see single command frames, in the order each connection sent them:
//!   a pipeline is split into its commands, and inside `MULTI` each queued
//!   command is its own frame (its reply is `+QUEUED`); to hit a transaction's
//!   outcome, match `EXEC`.
//! - Replies are paired with commands by parsing both directions (RESP2 and
//!   RESP3; RESP3 pushes are out-of-band), so a dropped, injected or reset
//!   reply never shifts another command's reply: a client sees either its own
//!   reply, an injected error in its place, silence, or a reset.
//! - Earlier commands on a connection keep their replies: a reset happens at
//!   the faulted command's place in the reply stream, after every earlier
//!   reply was delivered.
//! - Once a connection subscribes (`SUBSCRIBE`, `PSUBSCRIBE`, `SSUBSCRIBE`),
//!   runs `MONITOR` or `CLIENT REPLY`, replies stop pairing with commands: it
//!   is forwarded untouched for the rest of its life, and no rule applies to it.
//! - A frame larger than [`MAX_FRAME`] is a protocol error: the connection
//!   closes, so memory stays bounded.
//! - Dropping the proxy ends every task and closes every connection.
//! - [`RuleHandle::fired`] counts faults carried out, not commands matched: when
//!   it moves, the fault's effect on Redis is settled (see [`Action`]), and it
//!   moves before the client can observe the fault.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

/// The largest frame either way (Redis's own default `proto-max-bulk-len`).
pub const MAX_FRAME: usize = 512 * 1024 * 1024;

/// How much one socket read asks for.
const READ_CHUNK: usize = 64 * 1024;

/// How many bytes of a command's first argument the journal keeps.
const JOURNAL_ARG: usize = 40;

/// What to do to the commands that `matcher` selects, and when.
#[derive(Clone, Debug)]
pub struct Rule {
    pub matcher: Match,
    pub occurrence: Occurrence,
    pub action: Action,
}

impl Rule {
    pub fn new(matcher: Match, occurrence: Occurrence, action: Action) -> Rule {
        Rule {
            matcher,
            occurrence,
            action,
        }
    }
}

/// Which command frames a rule considers.
#[derive(Clone, Debug)]
pub enum Match {
    /// The command name, case-insensitive (`"HGETALL"`, `"EVALSHA"`, `"EXEC"`).
    Command(String),
    /// The command name, and any one of its arguments equal (bytes) to this.
    CommandArg(String, String),
    /// A Lua script by its SHA-1 (hex, case-insensitive), in any form:
    /// `EVALSHA`/`EVALSHA_RO <sha>`, `EVAL`/`EVAL_RO <body>` whose SHA-1 it
    /// is, or `FCALL`/`FCALL_RO` of the library function that runs it.
    Script(String),
    /// The first command matching the second on a connection after a
    /// command matching the first on that connection (e.g. the `WAIT` that
    /// follows a given script): each command matching the first arms the
    /// connection for the next one. Like any rule it sees only commands no
    /// earlier rule took; nested inside another `After` it matches nothing.
    After(Box<Match>, Box<Match>),
    Any,
}

/// Which of the matching commands a rule takes; commands count from the
/// rule's addition, over every connection.
#[derive(Clone, Copy, Debug)]
pub enum Occurrence {
    /// Only the n-th matching command (1-based).
    Nth(usize),
    /// The next k matching commands.
    Next(usize),
    Every,
}

/// The fault; each says when it counts as fired (always before the client
/// can observe it).
#[derive(Clone, Debug)]
pub enum Action {
    /// Forwards the command and discards its reply; from then on that
    /// connection swallows every reply (later commands are still forwarded),
    /// so its client sees silence. Fired once the discarded reply arrived:
    /// the command was applied.
    DropReply,
    /// Holds the command this long, then forwards it; later commands on the
    /// connection queue behind it, as on a slow link. Fired once forwarded.
    Delay(Duration),
    /// Resets the client connection (RST) instead of forwarding the command,
    /// once the replies to earlier commands were delivered: not applied.
    /// Fired as the reset happens.
    ResetBefore,
    /// Forwards the command, waits for its reply (so it was applied), then
    /// resets the client connection without that reply. Fired as the reset
    /// happens.
    ResetAfter,
    /// Does not forward the command; the client gets `-<msg>` (CR and LF
    /// become spaces) in its place and the connection goes on. Fired as the
    /// error is written.
    Error(String),
}

impl Action {
    fn describe(&self) -> String {
        match self {
            Action::DropReply => "drop reply".into(),
            Action::Delay(d) => format!("delay {d:?}"),
            Action::ResetBefore => "reset before".into(),
            Action::ResetAfter => "reset after".into(),
            Action::Error(msg) => format!("error {msg:?}"),
        }
    }
}

/// One client command frame, borrowed from the read buffer.
struct Command<'a> {
    frame: &'a [u8],
    args: Vec<&'a [u8]>,
}

impl Command<'_> {
    fn is(&self, name: &str) -> bool {
        self.args
            .first()
            .is_some_and(|a| a.eq_ignore_ascii_case(name.as_bytes()))
    }

    fn name(&self) -> String {
        self.args
            .first()
            .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
            .unwrap_or_default()
    }

    /// After this command the server's replies no longer pair one-to-one
    /// with commands (pushed messages, a monitor feed, muted replies).
    fn unpairs_replies(&self) -> bool {
        ["SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "MONITOR"]
            .iter()
            .any(|n| self.is(n))
            || (self.is("CLIENT")
                && self
                    .args
                    .get(1)
                    .is_some_and(|a| a.eq_ignore_ascii_case(b"REPLY")))
    }
}

impl Match {
    fn matches(&self, cmd: &Command) -> bool {
        match self {
            Match::Any => true,
            // Needs the connection's history: see `Armed::matches`.
            Match::After(..) => false,
            Match::Command(name) => cmd.is(name),
            Match::CommandArg(name, arg) => {
                cmd.is(name) && cmd.args.iter().skip(1).any(|a| *a == arg.as_bytes())
            }
            Match::Script(sha) => {
                let Some(target) = cmd.args.get(1) else {
                    return false;
                };
                if cmd.is("EVALSHA") || cmd.is("EVALSHA_RO") {
                    target.eq_ignore_ascii_case(sha.as_bytes())
                } else if cmd.is("EVAL") || cmd.is("EVAL_RO") {
                    sha1_smol::Sha1::from(target)
                        .digest()
                        .to_string()
                        .eq_ignore_ascii_case(sha)
                } else if cmd.is("FCALL") || cmd.is("FCALL_RO") {
                    distributor::edge::redis::scripts::function_of(sha)
                        .is_some_and(|f| *target == f.as_bytes())
                } else {
                    false
                }
            }
        }
    }
}

/// A rule in force, with its counters (guarded by the rules' lock).
struct Armed {
    id: u64,
    rule: Rule,
    /// Matching commands seen since the rule was added.
    seen: usize,
    /// Commands the rule took (its fault may not have completed yet).
    taken: usize,
    /// `taken`, for [`RuleHandle::wait_taken`].
    took: Arc<watch::Sender<usize>>,
    fired: Arc<watch::Sender<usize>>,
    /// For a [`Match::After`]: the connections whose last command matching
    /// either side matched the first.
    armed_on: HashSet<u64>,
}

impl Armed {
    /// Whether `cmd`, on connection `conn`, matches this rule's matcher.
    fn matches(&mut self, conn: u64, cmd: &Command) -> bool {
        let Match::After(first, then) = &self.rule.matcher else {
            return self.rule.matcher.matches(cmd);
        };
        if then.matches(cmd) && self.armed_on.remove(&conn) {
            return true;
        }
        if first.matches(cmd) {
            self.armed_on.insert(conn);
        }
        false
    }
}

#[derive(Default)]
struct Rules {
    next_id: u64,
    list: Vec<Armed>,
}

/// The connection tasks; `closed` once the proxy is dropped, so that the
/// accept loop cannot add one after the drop aborted the others.
#[derive(Default)]
struct Tasks {
    set: JoinSet<()>,
    closed: bool,
}

struct Shared {
    target_port: u16,
    started: std::time::Instant,
    rules: Mutex<Rules>,
    /// Forwarded commands by upper-case name.
    forwarded: Mutex<HashMap<String, usize>>,
    journal: Mutex<Vec<String>>,
    /// Bumped by [`FaultProxy::reset_all`]: every connection reset since.
    resets: watch::Sender<u64>,
    /// Open connections, by number, with the `resets` value they were born at.
    open: watch::Sender<BTreeMap<u64, u64>>,
    tasks: Mutex<Tasks>,
}

/// A poisoned lock only means a test panicked elsewhere: the data stays usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// The first rule that matches `cmd` and fires takes it; rules after it
    /// do not see it.
    fn decide(self: &Arc<Self>, conn: u64, cmd: &Command) -> Option<(Action, Firing)> {
        let mut rules = lock(&self.rules);
        for armed in rules.list.iter_mut() {
            if !armed.matches(conn, cmd) {
                continue;
            }
            armed.seen += 1;
            let fire = match armed.rule.occurrence {
                Occurrence::Nth(n) => armed.seen == n,
                Occurrence::Next(k) => armed.taken < k,
                Occurrence::Every => true,
            };
            if fire {
                armed.taken += 1;
                armed.took.send_replace(armed.taken);
                let firing = Firing {
                    fired: armed.fired.clone(),
                    shared: self.clone(),
                    line: journal_line(conn, cmd, &armed.rule.action),
                };
                return Some((armed.rule.action.clone(), firing));
            }
        }
        None
    }

    fn count_forwarded(&self, names: &mut Vec<String>) {
        let mut forwarded = lock(&self.forwarded);
        for name in names.drain(..) {
            *forwarded.entry(name).or_default() += 1;
        }
    }
}

/// The journal's text for one fault: never more than the first argument,
/// truncated, so that values do not leak into test logs.
fn journal_line(conn: u64, cmd: &Command, action: &Action) -> String {
    let arg = cmd.args.get(1).map_or(String::new(), |a| {
        let cut = &a[..a.len().min(JOURNAL_ARG)];
        format!(" {}", cut.escape_ascii())
    });
    format!("conn {conn}: {}{arg} -> {}", cmd.name(), action.describe())
}

/// A fault taken by a rule; [`Firing::complete`] once carried out.
struct Firing {
    fired: Arc<watch::Sender<usize>>,
    shared: Arc<Shared>,
    line: String,
}

impl Firing {
    fn complete(self) {
        let at = self.shared.started.elapsed().as_secs_f64();
        lock(&self.shared.journal).push(format!("{at:.3}s {}", self.line));
        self.fired.send_modify(|n| *n += 1);
    }
}

/// What the downstream half does at one command's place in the reply stream.
/// Sent before the command is written to Redis, so it is always queued by
/// the time the reply arrives.
enum Reply {
    Forward,
    /// Discard this reply and every later one.
    Drop(Firing),
    /// Discard this reply and reset the client connection.
    ResetAfter(Firing),
    /// No reply comes from Redis: reset the client connection here.
    ResetHere(Firing),
    /// No reply comes from Redis: send these bytes here.
    Inject(Vec<u8>, Firing),
    /// From here on, copy bytes without pairing them.
    Passthrough,
}

/// How a connection ended.
enum End {
    /// Closed normally (FIN), or after a protocol error.
    Close,
    /// Reset (RST), for a rule when it says which.
    Reset(Option<Firing>),
}

/// A fault-injecting proxy in front of the Redis on `127.0.0.1:<target_port>`.
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on `127.0.0.1:0`; each client connection gets its own
    /// connection to the target.
    pub async fn start(target_port: u16) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            target_port,
            started: std::time::Instant::now(),
            rules: Mutex::default(),
            forwarded: Mutex::default(),
            journal: Mutex::default(),
            resets: watch::Sender::new(0),
            open: watch::Sender::new(BTreeMap::new()),
            tasks: Mutex::default(),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        FaultProxy {
            port,
            shared,
            accept,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Rules are checked in insertion order; the first matching rule that
    /// fires takes the command, and the rules after it neither see nor count
    /// it (an earlier rule that matched without firing did count it).
    pub fn add(&self, rule: Rule) -> RuleHandle {
        let fired = Arc::new(watch::Sender::new(0));
        let took = Arc::new(watch::Sender::new(0));
        let mut rules = lock(&self.shared.rules);
        rules.next_id += 1;
        let id = rules.next_id;
        rules.list.push(Armed {
            id,
            rule,
            seen: 0,
            taken: 0,
            took: took.clone(),
            fired: fired.clone(),
            armed_on: HashSet::new(),
        });
        RuleHandle {
            id,
            took,
            fired,
            shared: Arc::downgrade(&self.shared),
        }
    }

    /// Removes every rule; faults already taken still complete.
    pub fn clear(&self) {
        lock(&self.shared.rules).list.clear();
    }

    /// Resets (RST) every client connection accepted so far; new ones work.
    /// The resets happen on the connections' tasks: [`FaultProxy::wait_reset`]
    /// waits for them.
    pub fn reset_all(&self) {
        self.shared.resets.send_modify(|g| *g += 1);
    }

    /// Whether every connection accepted before the last
    /// [`FaultProxy::reset_all`] is gone by `limit`.
    pub async fn wait_reset(&self, limit: Duration) -> bool {
        let generation = *self.shared.resets.borrow();
        let mut open = self.shared.open.subscribe();
        let gone = open.wait_for(|m| m.values().all(|born| *born >= generation));
        matches!(tokio::time::timeout(limit, gone).await, Ok(Ok(_)))
    }

    /// How many commands named `name` (case-insensitive) were forwarded to
    /// Redis so far, over every connection.
    pub fn commands(&self, name: &str) -> usize {
        let name = name.to_ascii_uppercase();
        lock(&self.shared.forwarded)
            .get(&name)
            .copied()
            .unwrap_or(0)
    }

    /// One line per fired rule, in completion order: seconds since the proxy
    /// started, connection number, command name, its first argument
    /// (truncated to 40 bytes), the action.
    pub fn journal(&self) -> Vec<String> {
        lock(&self.shared.journal).clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        let set = {
            let mut tasks = lock(&self.shared.tasks);
            tasks.closed = true;
            std::mem::take(&mut tasks.set)
        };
        // Dropping the set aborts every connection task; their sockets close
        // as the tasks are dropped.
        drop(set);
    }
}

/// A rule in force; dropping the handle leaves the rule in place.
pub struct RuleHandle {
    id: u64,
    took: Arc<watch::Sender<usize>>,
    fired: Arc<watch::Sender<usize>>,
    shared: Weak<Shared>,
}

impl RuleHandle {
    /// How many of its faults were carried out.
    pub fn fired(&self) -> usize {
        *self.fired.borrow()
    }

    /// Whether the rule fired at least `n` times by `limit`.
    pub async fn wait_fired(&self, n: usize, limit: Duration) -> bool {
        let mut fired = self.fired.subscribe();
        matches!(
            tokio::time::timeout(limit, fired.wait_for(|f| *f >= n)).await,
            Ok(Ok(_))
        )
    }

    /// Whether the rule took at least `n` commands by `limit`: a command is
    /// taken as it arrives, before its fault is carried out (a delayed one
    /// is in the proxy, not yet in Redis).
    pub async fn wait_taken(&self, n: usize, limit: Duration) -> bool {
        let mut took = self.took.subscribe();
        matches!(
            tokio::time::timeout(limit, took.wait_for(|t| *t >= n)).await,
            Ok(Ok(_))
        )
    }

    /// Takes the rule out; faults already taken still complete.
    pub fn remove(&self) {
        if let Some(shared) = self.shared.upgrade() {
            lock(&shared.rules).list.retain(|a| a.id != self.id);
        }
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut conn = 0;
    while let Ok((client, _)) = listener.accept().await {
        conn += 1;
        // Registered before the task runs, so that a reset_all from now on
        // reaches it and wait_reset waits for it.
        let resets = shared.resets.subscribe();
        let born = *resets.borrow();
        shared.open.send_modify(|m| {
            m.insert(conn, born);
        });
        let open = Open {
            conn,
            shared: shared.clone(),
        };
        let mut tasks = lock(&shared.tasks);
        if tasks.closed {
            return;
        }
        while tasks.set.try_join_next().is_some() {}
        tasks.set.spawn(serve(client, open, resets));
    }
}

/// A connection's entry in `open`, removed however its task ends.
struct Open {
    conn: u64,
    shared: Arc<Shared>,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.shared.open.send_modify(|m| {
            m.remove(&self.conn);
        });
    }
}

/// An abortive close: the peer gets a RST, not a FIN.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

async fn serve(mut client: TcpStream, open: Open, mut resets: watch::Receiver<u64>) {
    let shared = open.shared.clone();
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", shared.target_port)).await else {
        reset(client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let end = {
        let (from_client, to_client) = client.split();
        let (from_server, to_server) = server.split();
        let (replies, pending) = mpsc::unbounded_channel();
        tokio::select! {
            end = upstream(from_client, to_server, replies, open.conn, &shared) => end,
            end = downstream(from_server, to_client, pending) => end,
            _ = resets.changed() => End::Reset(None),
        }
    };
    if let End::Reset(firing) = end {
        // Counted before the client can see the reset.
        if let Some(firing) = firing {
            firing.complete();
        }
        reset(client);
    }
}

/// Reads more bytes into `buf`; 0 at end of stream or on an error.
async fn read_more(from: &mut ReadHalf<'_>, buf: &mut Vec<u8>) -> usize {
    buf.reserve(READ_CHUNK);
    from.read_buf(buf).await.unwrap_or(0)
}

/// Commands on their way to Redis, written in one go.
#[derive(Default)]
struct Outbox {
    bytes: Vec<u8>,
    names: Vec<String>,
}

impl Outbox {
    fn push(&mut self, cmd: &Command) {
        self.bytes.extend_from_slice(cmd.frame);
        if !cmd.args.is_empty() {
            self.names.push(cmd.name());
        }
    }

    async fn flush(&mut self, to: &mut WriteHalf<'_>, shared: &Shared) -> std::io::Result<()> {
        if !self.bytes.is_empty() {
            to.write_all(&self.bytes).await?;
            self.bytes.clear();
        }
        shared.count_forwarded(&mut self.names);
        Ok(())
    }
}

/// Client to Redis: splits the byte stream into commands and applies the rules.
async fn upstream(
    mut from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    replies: mpsc::UnboundedSender<Reply>,
    conn: u64,
    shared: &Arc<Shared>,
) -> End {
    let mut buf = Vec::new();
    let mut out = Outbox::default();
    let mut paired = true;
    loop {
        let mut at = 0;
        loop {
            let cmd = match parse_command(&buf[at..]) {
                Ok(Some(cmd)) => cmd,
                Ok(None) => break,
                Err(ProtocolError) => return End::Close,
            };
            at += cmd.frame.len();
            // An empty command gets no reply from Redis.
            if !paired || cmd.args.is_empty() {
                out.push(&cmd);
                continue;
            }
            if cmd.unpairs_replies() {
                paired = false;
                let _ = replies.send(Reply::Passthrough);
                out.push(&cmd);
                continue;
            }
            let Some((action, firing)) = shared.decide(conn, &cmd) else {
                let _ = replies.send(Reply::Forward);
                out.push(&cmd);
                continue;
            };
            match action {
                Action::DropReply => {
                    let _ = replies.send(Reply::Drop(firing));
                    out.push(&cmd);
                }
                Action::ResetAfter => {
                    let _ = replies.send(Reply::ResetAfter(firing));
                    out.push(&cmd);
                }
                Action::Error(msg) => {
                    let line = format!("-{}\r\n", msg.replace(['\r', '\n'], " "));
                    let _ = replies.send(Reply::Inject(line.into_bytes(), firing));
                }
                Action::Delay(delay) => {
                    if out.flush(&mut to, shared).await.is_err() {
                        return End::Close;
                    }
                    tokio::time::sleep(delay).await;
                    let _ = replies.send(Reply::Forward);
                    out.push(&cmd);
                    if out.flush(&mut to, shared).await.is_err() {
                        return End::Close;
                    }
                    firing.complete();
                }
                Action::ResetBefore => {
                    // Nothing more goes to Redis; the downstream half resets
                    // the connection once the earlier replies are delivered.
                    let _ = replies.send(Reply::ResetHere(firing));
                    let _ = out.flush(&mut to, shared).await;
                    return std::future::pending().await;
                }
            }
        }
        buf.drain(..at);
        if out.flush(&mut to, shared).await.is_err() {
            return End::Close;
        }
        if read_more(&mut from, &mut buf).await == 0 {
            // The client is done sending: let Redis answer what it has, and
            // end when Redis closes its side.
            let _ = to.shutdown().await;
            return std::future::pending().await;
        }
    }
}

/// What the downstream half does after a batch of replies.
enum Next {
    Read,
    Raw,
    End(End),
}

/// Redis to client: pairs each reply with its command's [`Reply`].
async fn downstream(
    mut from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    mut pending: mpsc::UnboundedReceiver<Reply>,
) -> End {
    let mut buf = Vec::new();
    let mut queue = VecDeque::new();
    let mut out = Vec::new();
    let mut done = Vec::new();
    let mut swallow = false;
    loop {
        let mut at = 0;
        let next = loop {
            while let Ok(r) = pending.try_recv() {
                queue.push_back(r);
            }
            // Places in the stream that wait for no reply from Redis.
            if matches!(
                queue.front(),
                Some(Reply::Inject(..) | Reply::ResetHere(_) | Reply::Passthrough)
            ) {
                match queue.pop_front() {
                    Some(Reply::Inject(bytes, firing)) => {
                        if !swallow {
                            out.extend_from_slice(&bytes);
                        }
                        done.push(firing);
                        continue;
                    }
                    Some(Reply::ResetHere(firing)) => break Next::End(End::Reset(Some(firing))),
                    _ => break Next::Raw,
                }
            }
            let (len, push) = match parse_reply(&buf[at..]) {
                Ok(Some(reply)) => reply,
                Ok(None) => break Next::Read,
                Err(ProtocolError) => break Next::End(End::Close),
            };
            let reply = &buf[at..at + len];
            at += len;
            // Pushes are out-of-band; a reply with no command (an error
            // before Redis closes) is passed on as it is.
            if push {
                if !swallow {
                    out.extend_from_slice(reply);
                }
                continue;
            }
            match queue.pop_front() {
                None | Some(Reply::Forward) => {
                    if !swallow {
                        out.extend_from_slice(reply);
                    }
                }
                Some(Reply::Drop(firing)) => {
                    swallow = true;
                    done.push(firing);
                }
                Some(Reply::ResetAfter(firing)) => break Next::End(End::Reset(Some(firing))),
                Some(_) => unreachable!("handled before reading a reply"),
            }
        };
        // Counted before the client can see the fault.
        for firing in done.drain(..) {
            firing.complete();
        }
        if !out.is_empty() {
            if to.write_all(&out).await.is_err() {
                return End::Close;
            }
            out.clear();
        }
        match next {
            Next::End(end) => return end,
            Next::Raw => return raw(from, to, &buf[at..], swallow).await,
            Next::Read => {}
        }
        buf.drain(..at);
        tokio::select! {
            r = pending.recv() => match r {
                Some(r) => queue.push_back(r),
                None => return End::Close,
            },
            n = read_more(&mut from, &mut buf) => if n == 0 {
                return End::Close;
            },
        }
    }
}

/// Copies Redis's bytes to the client as they come (or swallows them).
async fn raw(mut from: ReadHalf<'_>, mut to: WriteHalf<'_>, rest: &[u8], swallow: bool) -> End {
    if !swallow && to.write_all(rest).await.is_err() {
        return End::Close;
    }
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if read_more(&mut from, &mut buf).await == 0 {
            return End::Close;
        }
        if !swallow && to.write_all(&buf).await.is_err() {
            return End::Close;
        }
    }
}

/// Bytes that are not RESP, or a frame beyond [`MAX_FRAME`].
#[derive(Debug, PartialEq)]
struct ProtocolError;

/// The line that starts at `at` (without its `\r\n`) and where the next one
/// starts; `None` until it is complete.
fn line(buf: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    match buf[at..].windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok(Some((&buf[at..at + i], at + i + 2))),
        None if buf.len() - at > MAX_FRAME => Err(ProtocolError),
        None => Ok(None),
    }
}

fn int(line: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(ProtocolError)
}

/// A length or count, bounded by [`MAX_FRAME`]; negative ones (nulls) are 0.
fn size(line: &[u8]) -> Result<usize, ProtocolError> {
    let n = int(line)?.max(0) as u64;
    if n > MAX_FRAME as u64 {
        return Err(ProtocolError);
    }
    Ok(n as usize)
}

/// The first command in `buf`: a RESP array of bulk strings, or an inline
/// command (a line split on spaces); `None` until it is complete. Args are
/// empty for a frame Redis ignores (`*0`, an empty line).
fn parse_command(buf: &[u8]) -> Result<Option<Command<'_>>, ProtocolError> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_array_command(buf),
        Some(_) => Ok(parse_inline_command(buf)?),
    }
}

fn parse_array_command(buf: &[u8]) -> Result<Option<Command<'_>>, ProtocolError> {
    let Some((header, mut at)) = line(buf, 1)? else {
        return Ok(None);
    };
    let n = size(header)?;
    let mut args = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        match buf.get(at) {
            None => return Ok(None),
            Some(b'$') => {}
            Some(_) => return Err(ProtocolError),
        }
        let Some((header, start)) = line(buf, at + 1)? else {
            return Ok(None);
        };
        let end = start + size(header)?;
        if end > MAX_FRAME {
            return Err(ProtocolError);
        }
        if buf.len() < end + 2 {
            return Ok(None);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err(ProtocolError);
        }
        args.push(&buf[start..end]);
        at = end + 2;
    }
    Ok(Some(Command {
        frame: &buf[..at],
        args,
    }))
}

fn parse_inline_command(buf: &[u8]) -> Result<Option<Command<'_>>, ProtocolError> {
    let Some(i) = buf.iter().position(|b| *b == b'\n') else {
        return if buf.len() > MAX_FRAME {
            Err(ProtocolError)
        } else {
            Ok(None)
        };
    };
    let text = buf[..i].strip_suffix(b"\r").unwrap_or(&buf[..i]);
    let args = text
        .split(|b| *b == b' ' || *b == b'\t')
        .filter(|a| !a.is_empty())
        .collect();
    Ok(Some(Command {
        frame: &buf[..=i],
        args,
    }))
}

/// The length of the first complete reply in `buf` (with any attributes
/// before it), and whether it is an out-of-band RESP3 push; `None` until it
/// is complete.
fn parse_reply(buf: &[u8]) -> Result<Option<(usize, bool)>, ProtocolError> {
    let mut at = 0;
    while buf.get(at) == Some(&b'|') {
        let Some((header, next)) = line(buf, at + 1)? else {
            return Ok(None);
        };
        let Some(end) = skip_values(buf, next, 2 * size(header)?)? else {
            return Ok(None);
        };
        at = end;
    }
    let push = buf.get(at) == Some(&b'>');
    Ok(skip_values(buf, at, 1)?.map(|end| (end, push)))
}

/// Where the `count` values that start at `at` end; `None` until complete.
fn skip_values(
    buf: &[u8],
    mut at: usize,
    mut count: usize,
) -> Result<Option<usize>, ProtocolError> {
    while count > 0 {
        let Some(&kind) = buf.get(at) else {
            return Ok(None);
        };
        let Some((header, next)) = line(buf, at + 1)? else {
            return Ok(None);
        };
        count -= 1;
        at = next;
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {}
            b'$' | b'!' | b'=' => {
                if int(header)? >= 0 {
                    let end = at + size(header)?;
                    if buf.len() < end + 2 {
                        return Ok(None);
                    }
                    if &buf[end..end + 2] != b"\r\n" {
                        return Err(ProtocolError);
                    }
                    at = end + 2;
                }
            }
            b'*' | b'~' | b'>' => count += size(header)?,
            b'%' => count += 2 * size(header)?,
            // Attributes annotate the value after them.
            b'|' => count += 2 * size(header)? + 1,
            _ => return Err(ProtocolError),
        }
        if at > MAX_FRAME || count > MAX_FRAME {
            return Err(ProtocolError);
        }
    }
    Ok(Some(at))
}
