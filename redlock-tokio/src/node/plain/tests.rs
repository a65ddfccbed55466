//! Our own connection over an in-memory stream.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// A connection over an in-memory stream of `buffer` bytes, its wire
/// spawned (it runs once the test awaits), and the server's end.
fn connected(buffer: usize) -> (Plain, tokio::task::JoinHandle<()>, tokio::io::DuplexStream) {
    let (ours, server) = tokio::io::duplex(buffer);
    let (plain, mut wire) = Plain::new(ours, None);
    (
        plain,
        tokio::spawn(async move { until_end(&mut wire).await }),
        server,
    )
}

fn ints(answers: Answers) -> Vec<i64> {
    answers
        .expect("the connection stands")
        .into_iter()
        .map(|answer| match answer {
            Ok(Response::Int(n)) => n,
            other => panic!("{other:?}"),
        })
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn batches_are_written_at_once_and_answered_in_order_whatever_the_reads() {
    let (plain, _wire, mut server) = connected(64);
    let first = plain.call(2, |out| out.extend_from_slice(b"A\r\nB\r\n"));
    let second = plain.call(1, |out| out.extend_from_slice(b"C\r\n"));
    // Neither call was polled: their bytes were queued as they were made.
    let mut read = vec![0; 9];
    server.read_exact(&mut read).await.unwrap();
    assert_eq!(read, b"A\r\nB\r\nC\r\n");
    // The answers arrive a byte at a time.
    let answers = b":1\r\n:2\r\n:3\r\n";
    let writing = tokio::spawn(async move {
        for byte in answers {
            server.write_all(&[*byte]).await.unwrap();
            tokio::task::yield_now().await;
        }
        server
    });
    assert_eq!(ints(first.await), [1, 2]);
    assert_eq!(ints(second.await), [3]);
    drop(writing.await);
}

#[tokio::test(flavor = "current_thread")]
async fn an_answer_to_no_request_ends_the_connection() {
    let (plain, wire, mut server) = connected(64);
    server.write_all(b"+hello\r\n").await.unwrap();
    wire.await.unwrap();
    let error = plain.call(1, |_| {}).await.unwrap_err();
    assert_eq!(error.kind, NodeErrorKind::Protocol, "{error}");
}

#[tokio::test(flavor = "current_thread")]
async fn garbage_and_a_closed_stream_fail_what_waits() {
    let (plain, _wire, mut server) = connected(64);
    let call = plain.call(2, |out| out.extend_from_slice(b"x"));
    server.write_all(b":1\r\nHTTP/1.1").await.unwrap();
    assert_eq!(call.await.unwrap_err().kind, NodeErrorKind::Protocol);

    let (plain, _wire, server) = connected(64);
    let call = plain.call(1, |out| out.extend_from_slice(b"x"));
    drop(server);
    assert_eq!(call.await.unwrap_err().kind, NodeErrorKind::Connection);
}

#[tokio::test(flavor = "current_thread")]
async fn the_last_handle_gone_what_was_queued_is_written_then_the_wire_ends() {
    let (plain, wire, mut server) = connected(4);
    drop(plain.call(1, |out| out.extend_from_slice(b"DEL k\r\n")));
    drop(plain);
    let mut read = Vec::new();
    server.read_to_end(&mut read).await.unwrap();
    assert_eq!(read, b"DEL k\r\n");
    wire.await.unwrap();
}
