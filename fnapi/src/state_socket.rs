//! The State API on a plain socket, for the Python harnesses this runner
//! starts with `beam_kafka.boot` (told where by `BEAM_KAFKA_STATE_SOCKET`).
//!
//! Through grpc-python every state answer passes four harness threads, one
//! at a time, and each hand-over waits for the scheduler: on a loaded
//! 2-core machine that capped a harness at ~200 answers/s, and a stateful
//! DoFn of new keys spent 96% of its bundle time waiting for reads and
//! writes. On this socket the bundle's thread writes its request itself, one
//! reader thread takes every answer that arrived in one wake-up, and the
//! runner writes the answers to all requests it has read in one flush.
//!
//! Frames both ways: a 4-byte big-endian length, then the bytes. The first
//! frame from the harness is its worker id (the secret the Fn API services
//! check as a header); after it, `StateRequest`s one way and their
//! `StateResponse`s the other, in order, answered exactly as the gRPC
//! service answers them (`state_service::answer`).
use std::sync::Arc;
use std::time::Duration;

use beam_kafka_proto::fn_execution as fn_pb;
use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};

use crate::registry::Registry;

/// The environment variable that tells a booted harness where to connect.
pub const STATE_SOCKET_ENV: &str = "BEAM_KAFKA_STATE_SOCKET";

/// The largest frame accepted: the gRPC services' message limit.
const MAX_FRAME_BYTES: usize = 256 << 20;

/// Accepts connections on `listener` until the process ends.
pub(crate) async fn serve(listener: TcpListener, registry: Arc<Registry>) {
    loop {
        match listener.accept().await {
            Ok((conn, _)) => {
                let registry = registry.clone();
                tokio::spawn(async move {
                    if let Err(e) = connection(conn, registry).await {
                        tracing::debug!("a state socket closed: {e}");
                    }
                });
            }
            Err(e) => {
                // Out of file descriptors, say: harnesses fall back to gRPC.
                tracing::warn!("the state socket cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(conn: TcpStream, registry: Arc<Registry>) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let (reader, writer) = conn.into_split();
    let mut reader = BufReader::with_capacity(64 << 10, reader);
    let mut writer = BufWriter::with_capacity(64 << 10, writer);
    let hello = read_frame(&mut reader).await?.ok_or_else(|| invalid("the connection closed before its worker id"))?;
    let id = String::from_utf8(hello).map_err(|_| invalid("the worker id is not UTF-8"))?;
    let worker = registry
        .worker(&id)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::PermissionDenied, "unknown or unconnected worker id"))?;
    while let Some(frame) = read_frame(&mut reader).await? {
        let request = fn_pb::StateRequest::decode(frame.as_slice()).map_err(|e| invalid(&format!("a bad StateRequest: {e}")))?;
        let bytes = crate::state_service::answer(&worker, request).encode_to_vec();
        writer.write_u32(frame_len(bytes.len())?).await?;
        writer.write_all(&bytes).await?;
        // Requests already read get their answers in the same write.
        if reader.buffer().is_empty() {
            writer.flush().await?;
        }
    }
    writer.flush().await
}

/// The next frame, or None when the peer closed between frames.
async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> std::io::Result<Option<Vec<u8>>> {
    let len = match reader.read_u32().await {
        Ok(n) => n as usize,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    };
    if len > MAX_FRAME_BYTES {
        return Err(invalid(&format!("a frame of {len} bytes is over the {MAX_FRAME_BYTES}-byte limit")));
    }
    let mut buf = vec![0; len];
    reader.read_exact(&mut buf).await?;
    Ok(Some(buf))
}

fn frame_len(len: usize) -> std::io::Result<u32> {
    u32::try_from(len).map_err(|_| invalid("an answer too large for one frame"))
}

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_are_read_whole_and_a_close_between_them_ends_the_stream() {
        let mut bytes = Vec::new();
        for payload in [&b"worker-1"[..], b"", b"\x01\x02\x03"] {
            bytes.extend_from_slice(&(payload.len() as u32).to_be_bytes());
            bytes.extend_from_slice(payload);
        }
        let mut reader = bytes.as_slice();
        assert_eq!(read_frame(&mut reader).await.unwrap().unwrap(), b"worker-1");
        assert_eq!(read_frame(&mut reader).await.unwrap().unwrap(), b"");
        assert_eq!(read_frame(&mut reader).await.unwrap().unwrap(), vec![1, 2, 3]);
        assert!(read_frame(&mut reader).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_frame_cut_short_or_too_large_is_an_error() {
        let mut cut = Vec::new();
        cut.extend_from_slice(&10u32.to_be_bytes());
        cut.extend_from_slice(b"abc");
        assert!(read_frame(&mut cut.as_slice()).await.is_err());
        let huge = ((MAX_FRAME_BYTES + 1) as u32).to_be_bytes();
        let err = read_frame(&mut &huge[..]).await.unwrap_err();
        assert!(err.to_string().contains("over the"), "{err}");
    }

    #[tokio::test]
    async fn a_connection_with_an_unknown_worker_id_is_refused() {
        let registry = Arc::new(Registry::default());
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (conn, _) = listener.accept().await.unwrap();
            connection(conn, registry).await
        });
        let mut client = TcpStream::connect(addr).await.unwrap();
        client.write_u32(7).await.unwrap();
        client.write_all(b"nobody!").await.unwrap();
        let err = server.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
    }
}
