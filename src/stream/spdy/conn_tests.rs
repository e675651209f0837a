use super::*;

/// A client and a server connection joined by an in-memory pipe of `pipe` bytes (small, so
/// frames arrive in pieces and the reader's buffers fill and turn over).
fn pair(pipe: usize) -> (Connection, Incoming) {
    let (a, b) = tokio::io::duplex(pipe);
    let (client, _, _) = start(a, Role::Client, Settings::default());
    let (_, incoming, _) = start(b, Role::Server, Settings::default());
    (client, incoming)
}

/// Bytes no two positions of which repeat within a frame, so a misplaced piece shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ (i / 251) as u8)
        .collect()
}

async fn open(client: &Connection, incoming: &mut Incoming) -> (SendHalf, RecvHalf) {
    let mut h = HeaderBlock::new();
    h.insert("streamtype", "data");
    let (opened, accepted) = tokio::join!(client.open(h), async {
        let s = incoming.next().await.unwrap();
        s.reply().await.unwrap();
        s
    });
    // Each end keeps the half it uses: the stream lives while either half does.
    let (_, tx) = opened.unwrap().into_split();
    let (rx, _) = accepted.into_split();
    (tx, rx)
}

#[tokio::test]
async fn a_bulk_transfer_arrives_whole_and_in_order_through_the_read_buffers() {
    let (client, mut incoming) = pair(48 * 1024);
    let (tx, mut rx) = open(&client, &mut incoming).await;
    // Several times the reader's ring, in sends that are not a multiple of the frame size.
    let sent = pattern(5 * READ_BUFS * READ_BUF + 12_345);
    let sending = async {
        for piece in sent.chunks(200_003) {
            tx.send(piece).await.unwrap();
        }
        tx.close().await.unwrap();
    };
    let receiving = async {
        let mut got = Vec::new();
        while let Some(b) = rx.recv().await.unwrap() {
            got.extend_from_slice(&b);
        }
        got
    };
    let ((), got) = tokio::join!(sending, receiving);
    assert_eq!(got.len(), sent.len());
    assert!(got == sent, "the received bytes differ from those sent");
}

/// Sends the pieces and a FIN, and lets the server's reader deliver them all.
async fn sent_and_ended(tx: &SendHalf, pieces: &[&[u8]]) {
    for piece in pieces {
        tx.send(piece).await.unwrap();
    }
    tx.close().await.unwrap();
    // The reader task runs on this same thread: a pause lets it take in everything written.
    tokio::time::sleep(Duration::from_millis(50)).await;
}

fn texts(batch: &mut Vec<Bytes>) -> Vec<String> {
    batch
        .drain(..)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .collect()
}

#[tokio::test]
async fn a_batch_takes_what_has_arrived_up_to_its_limit_and_the_end_comes_after_it() {
    let (client, mut incoming) = pair(1 << 20);
    let (tx, mut rx) = open(&client, &mut incoming).await;
    sent_and_ended(&tx, &[b"one", b"two", b"three"]).await;
    let mut batch = Vec::new();
    // The limit is checked before each further piece: "one" is under 4 bytes, "two" not.
    assert!(rx.recv_batch(&mut batch, 4).await.unwrap());
    assert_eq!(texts(&mut batch), ["one", "two"]);
    assert!(rx.recv_batch(&mut batch, 4).await.unwrap());
    assert_eq!(texts(&mut batch), ["three"]);
    assert!(!rx.recv_batch(&mut batch, 4).await.unwrap());
    assert!(batch.is_empty());

    // A batch that reaches the FIN keeps it for the next call, after the data.
    let (tx, mut rx) = open(&client, &mut incoming).await;
    sent_and_ended(&tx, &[b"four", b"five"]).await;
    assert!(rx.recv_batch(&mut batch, 1 << 20).await.unwrap());
    assert_eq!(texts(&mut batch), ["four", "five"]);
    assert!(!rx.recv_batch(&mut batch, 1 << 20).await.unwrap());
}
