//! A TCP forwarder on 127.0.0.1 for the host-side clients of a replicated
//! Redis (the checker, the workers, the producer): what the network alias
//! `redis` is for the containers. Pointing it elsewhere closes every forwarded
//! connection, as a failover does; pointing it nowhere refuses connections.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct Forwarder {
    pub port: u16,
    target: watch::Sender<Option<SocketAddr>>,
    task: JoinHandle<()>,
}

impl Forwarder {
    pub async fn start(target: SocketAddr) -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = watch::channel(Some(target));
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let mut rx = rx.clone();
                let Some(to) = *rx.borrow_and_update() else {
                    continue; // dropped: refused
                };
                tokio::spawn(async move {
                    let out =
                        tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(to)).await;
                    let Ok(Ok(mut out)) = out else { return };
                    let _ = inbound.set_nodelay(true);
                    let _ = out.set_nodelay(true);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut out) => {}
                        // Moved (or the forwarder is gone): cut.
                        _ = rx.changed() => {}
                    }
                });
            }
        });
        Forwarder {
            port,
            target: tx,
            task,
        }
    }

    /// From now on new connections go to `to` (none: refused); the forwarded
    /// ones are closed.
    pub fn point_to(&self, to: Option<SocketAddr>) {
        self.target.send_replace(to);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}
