use super::*;

/// A client and a server connection joined by an in-memory pipe of `pipe` bytes (small, so
/// frames arrive in pieces and the reader's buffers fill and turn over).
fn pair(pipe: usize) -> (Connection, Incoming) {
    pair_with(pipe, Settings::default())
}

/// Like `pair`, the server end with `server` settings.
fn pair_with(pipe: usize, server: Settings) -> (Connection, Incoming) {
    let (a, b) = tokio::io::duplex(pipe);
    let (client, _, _) = start(a, Role::Client, Settings::default());
    let (_, incoming, _) = start(b, Role::Server, server);
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
    let receiving = received(&mut rx);
    let ((), got) = tokio::join!(sending, receiving);
    assert_eq!(got.len(), sent.len());
    assert!(got == sent, "the received bytes differ from those sent");
}

/// Everything the stream brings until the peer's FIN.
async fn received(rx: &mut RecvHalf) -> Vec<u8> {
    let mut got = Vec::new();
    while let Some(b) = rx.recv().await.unwrap() {
        got.extend_from_slice(&b);
    }
    got
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

#[tokio::test]
async fn spliced_payloads_arrive_whole_and_in_order_between_frames() {
    use tokio::net::{TcpListener, TcpStream};
    let tcp_pair = async || {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        (a, l.accept().await.unwrap().0)
    };
    let (c, s) = tcp_pair().await;
    // A small receive window: the splicing side waits for WINDOW_UPDATEs.
    let small = Settings {
        recv_window: 100_000,
        ..Settings::default()
    };
    let (client, _, _) = start(c, Role::Client, small);
    let (_, mut incoming, _) = start_tcp(s, Bytes::new(), Role::Server, Settings::default());
    let mut h = HeaderBlock::new();
    h.insert("streamtype", "data");
    let (opened, accepted) = tokio::join!(client.open(h), async {
        let s = incoming.next().await.unwrap();
        s.reply().await.unwrap();
        s
    });
    let (mut rx, _client_tx) = opened.unwrap().into_split();
    let (_server_rx, tx) = accepted.into_split();
    assert!(tx.can_splice());

    let (mut source, from) = tcp_pair().await;
    let sent = pattern(3 * SPLICE_BYTES + 777);
    let writing = {
        let sent = sent.clone();
        tokio::spawn(async move {
            source.write_all(&sent).await.unwrap();
            source.shutdown().await.unwrap();
        })
    };
    let sending = async {
        let mut pipe = Pipe::new().unwrap();
        // Frames of the same stream sent the ordinary way go between the spliced ones.
        tx.send(b"<").await.unwrap();
        while tx.splice_from(&from, &mut pipe).await.unwrap() > 0 {}
        tx.send(b">").await.unwrap();
        tx.close().await.unwrap();
    };
    let receiving = received(&mut rx);
    let ((), got) = tokio::join!(sending, receiving);
    writing.await.unwrap();
    assert_eq!(got.len(), sent.len() + 2);
    assert!(
        got[1..got.len() - 1] == sent[..],
        "the spliced bytes differ"
    );
    assert_eq!((got[0], got[got.len() - 1]), (b'<', b'>'));
}

#[tokio::test]
async fn a_frame_cut_short_leaves_the_connection_unusable() {
    // Nobody reads the other end: a big frame cannot be written whole.
    let (a, _b) = tokio::io::duplex(1024);
    let mut w = Writer {
        io: WriteIo::Other(Box::pin(a)),
        enc: Encoder::new(),
        buf: Vec::new(),
        torn: false,
    };
    let cut = tokio::time::timeout(Duration::from_millis(50), w.write_data(1, &[0; 65536]));
    assert!(cut.await.is_err(), "the write should not have finished");
    let e = w.write_data(1, b"next").await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    let ping = Frame::Ping(super::super::frame::Ping { id: 1 });
    assert!(w.write(&[ping]).await.is_err());
}

#[tokio::test]
async fn credit_goes_back_when_the_consumer_asks_for_more_not_when_it_takes_the_bytes() {
    // The server advertises the 64 KiB default window; this end's client honours it.
    let server = Settings {
        recv_window: super::super::proto::DEFAULT_WINDOW,
        ..Settings::default()
    };
    let (client, mut incoming) = pair_with(1 << 20, server);
    let (tx, mut rx) = open(&client, &mut incoming).await;
    let id = tx.id();
    let window = 64 * 1024;
    tx.send(&pattern(window)).await.unwrap();
    let got = rx.recv().await.unwrap().unwrap();
    assert_eq!(got.len(), window);

    // Taken, not consumed: the inbox, the connection's budget and the peer's window still
    // count the bytes, and the client may send nothing more.
    assert_eq!(rx.credit.available_permits(), server.inbox_bytes - window);
    assert_eq!(
        rx.shared.budget.available_permits(),
        server.conn_inbox_bytes - window
    );
    assert_eq!(rx.shared.state().proto.recv_window_of(id), Some(0));
    assert_eq!(client.shared.state().proto.take_send_window(id, 1), Ok(0));
    let more = tokio::spawn(async move {
        tx.send(b"!").await.unwrap();
        tx
    });

    // Asking for more gives the credit back: the client's byte comes through.
    let next = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
    assert_eq!(
        &next.expect("no credit came back").unwrap().unwrap()[..],
        b"!"
    );
    let window_left = rx.shared.state().proto.recv_window_of(id).unwrap();
    assert_eq!(window_left, window as i64 - 1);
    assert_eq!(rx.credit.available_permits(), server.inbox_bytes - 1);
    let _tx = more.await.unwrap();
}

#[tokio::test]
async fn small_payloads_are_copied_out_of_the_read_buffer_and_big_ones_are_not() {
    let (client, mut incoming) = pair(1 << 20);
    let (tx, mut rx) = open(&client, &mut incoming).await;
    let big = pattern(READ_BUF / PIN_SHARE);
    sent_and_ended(&tx, &[b"x", &big, b"y"]).await;
    let mut kept = Vec::new();
    while let Some(b) = rx.recv().await.unwrap() {
        kept.push(b);
    }
    assert_eq!(kept.len(), 3);
    // A copy owns its memory alone; a slice shares the reader's buffer.
    assert!(
        kept[0].is_unique() && kept[2].is_unique(),
        "small payloads pin a read buffer"
    );
    assert_eq!((&kept[0][..], &kept[2][..]), (&b"x"[..], &b"y"[..]));
    assert!(!kept[1].is_unique(), "a big payload was copied");
    assert!(kept[1] == big);
}
