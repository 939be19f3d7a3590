//! Notifications: a subscription to channels (the lease's, the table's), on its own
//! connection.
//!
//! Guarantees:
//! - the subscription lives until cancelled or its receiver is dropped: on any
//!   error, or a connection that goes silent (a `PING` every second, each
//!   under the call deadline), it reconnects with backoff;
//! - every (re-)subscription is announced with [`Notification::Subscribed`],
//!   since messages published meanwhile are lost: the receiver re-reads.

use super::sentinel::Node;
use std::time::Duration;

use redis::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Notification, Store, redis_err};
use crate::error::StoreError;

impl Store {
    /// Subscribes to `channels` on a dedicated connection, forever: on any error it
    /// reconnects with backoff and sends [`Notification::Subscribed`] again, since
    /// messages published meanwhile are lost. Ends when `cancel` fires or the
    /// receiver is dropped.
    pub fn subscribe(
        &self,
        channels: Vec<String>,
        cancel: CancellationToken,
    ) -> mpsc::Receiver<Notification> {
        let (tx, rx) = mpsc::channel(64);
        let client = self.client.clone();
        let op_timeout = self.op_timeout;
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(50);
            loop {
                let session = subscription(&client, &channels, &tx, op_timeout);
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tx.closed() => return,
                    r = session => {
                        if let Err(e) = r {
                            tracing::debug!(error = %e, "notification subscription lost; reconnecting");
                        }
                    }
                }
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        });
        rx
    }
}

/// One subscription session; returns when the connection fails.
async fn subscription(
    client: &Node,
    channels: &[String],
    tx: &mpsc::Sender<Notification>,
    op_timeout: Duration,
) -> Result<(), StoreError> {
    use futures::StreamExt;
    let pubsub = match tokio::time::timeout(op_timeout, async {
        client.client().await?.get_async_pubsub().await
    })
    .await
    {
        Ok(r) => r.map_err(redis_err("subscribe"))?,
        Err(_) => {
            return Err(StoreError::Timeout {
                op: "subscribe",
                timeout: op_timeout,
            });
        }
    };
    let (mut sink, mut stream) = pubsub.split();
    for ch in channels {
        match tokio::time::timeout(op_timeout, sink.subscribe(ch)).await {
            Ok(r) => r.map_err(redis_err("subscribe"))?,
            Err(_) => {
                return Err(StoreError::Timeout {
                    op: "subscribe",
                    timeout: op_timeout,
                });
            }
        }
    }
    if tx.send(Notification::Subscribed).await.is_err() {
        return Ok(());
    }
    // A silent network partition never ends the stream; a periodic PING does.
    let mut probe = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            msg = stream.next() => {
                let Some(msg) = msg else { return Ok(()) };
                let payload = String::from_utf8_lossy(msg.get_payload_bytes()).into_owned();
                if tx.send(Notification::Message(msg.get_channel_name().to_string(), payload)).await.is_err() {
                    return Ok(());
                }
            }
            _ = probe.tick() => {
                match tokio::time::timeout(op_timeout, sink.ping::<Value>()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Err(redis_err("subscribe ping")(e)),
                    Err(_) => return Err(StoreError::Timeout { op: "subscribe ping", timeout: op_timeout }),
                }
            }
        }
    }
}
