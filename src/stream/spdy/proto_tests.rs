use super::*;

fn syn(id: StreamId, fin: bool) -> Frame {
    let mut h = HeaderBlock::new();
    h.insert("streamtype", "data");
    let mut f = SynStream::new(id, h);
    f.fin = fin;
    Frame::SynStream(f)
}

fn data(id: StreamId, len: usize, fin: bool) -> Frame {
    Frame::Data(Data {
        stream_id: id,
        fin,
        payload: Bytes::from(vec![0u8; len]),
    })
}

#[test]
fn a_peer_stream_lives_until_both_sides_end_it() {
    let mut c = Conn::new(Role::Server, 10);
    let o = c.recv(syn(1, false)).unwrap();
    assert!(matches!(o.event, Event::Opened { stream_id: 1, .. }));
    c.reply(1, HeaderBlock::new()).unwrap();
    assert_eq!(c.reply(1, HeaderBlock::new()), Err(SendError::Replied(1)));
    let o = c.recv(data(1, 5, false)).unwrap();
    assert!(matches!(o.event, Event::Data { stream_id: 1, .. }));
    let o = c.recv(data(1, 0, true)).unwrap();
    assert_eq!(o.event, Event::Finished { stream_id: 1 });
    assert_eq!(c.open_streams(), 1);
    assert!(matches!(
        c.close(1),
        Ok(Frame::Data(Data { fin: true, .. }))
    ));
    assert_eq!(c.open_streams(), 0);
    assert_eq!(c.close(1), Err(SendError::Gone(1)));
}

#[test]
fn stream_ids_must_increase_with_the_peers_parity() {
    let mut c = Conn::new(Role::Server, 10);
    c.recv(syn(5, false)).unwrap();
    assert!(c.recv(syn(3, false)).is_err());
    assert!(c.recv(syn(6, false)).is_err());
    let mut client = Conn::new(Role::Client, 10);
    assert!(client.recv(syn(1, false)).is_err());
    assert!(client.recv(syn(2, false)).is_ok());
}

#[test]
fn streams_over_the_limit_are_refused_and_goaway_stops_new_ones() {
    let mut c = Conn::new(Role::Server, 1);
    c.recv(syn(1, false)).unwrap();
    let o = c.recv(syn(3, false)).unwrap();
    assert_eq!(o.event, Event::None);
    assert_eq!(
        o.replies,
        vec![Frame::RstStream(RstStream::new(
            3,
            RstStatus::RefusedStream
        ))]
    );
    let g = c.go_away(GoAwayStatus::Ok);
    assert_eq!(
        g,
        Frame::GoAway(GoAway {
            last_good_stream_id: 3,
            status: GoAwayStatus::Ok
        })
    );
    c.reset(1, RstStatus::Cancel).unwrap();
    assert_eq!(c.recv(syn(5, false)).unwrap().event, Event::None);
    assert_eq!(c.open(HeaderBlock::new(), false), Err(SendError::GoingAway));
}

#[test]
fn pings_from_the_peer_are_echoed_and_ours_are_pongs() {
    let mut c = Conn::new(Role::Server, 10);
    let o = c.recv(Frame::Ping(Ping { id: 1 })).unwrap();
    assert_eq!(o.replies, vec![Frame::Ping(Ping { id: 1 })]);
    let Frame::Ping(mine) = c.ping() else {
        panic!()
    };
    assert_eq!(mine.id % 2, 0);
    assert_eq!(
        c.recv(Frame::Ping(mine)).unwrap().event,
        Event::Pong { id: mine.id }
    );
}

#[test]
fn data_after_fin_resets_and_unknown_streams_are_ignored() {
    let mut c = Conn::new(Role::Server, 10);
    c.recv(syn(1, true)).unwrap();
    let o = c.recv(data(1, 3, false)).unwrap();
    assert_eq!(
        o.event,
        Event::Reset {
            stream_id: 1,
            status: RstStatus::StreamAlreadyClosed
        }
    );
    assert_eq!(c.recv(data(99, 3, false)).unwrap().event, Event::None);
    assert_eq!(
        c.recv(Frame::RstStream(RstStream::new(77, RstStatus::Cancel)))
            .unwrap()
            .event,
        Event::None
    );
}

#[test]
fn receive_windows_are_replenished_when_consumed_not_when_received() {
    let mut c = Conn::new(Role::Server, 10);
    c.recv(syn(1, false)).unwrap();
    let o = c.recv(data(1, 40_000, false)).unwrap();
    assert!(o.replies.is_empty(), "credit before consumption: {o:?}");
    assert_eq!(
        c.consumed(1, 40_000),
        vec![window_update(0, 40_000), window_update(1, 40_000)]
    );
    // Bytes for a stream gone here are dropped at once: only the connection gets them back.
    let o = c.recv(data(9, 40_000, false)).unwrap();
    assert_eq!(o.replies, vec![window_update(0, 40_000)]);
}

#[test]
fn a_peer_doing_flow_control_that_overruns_a_window_has_the_stream_reset() {
    let mut c = Conn::new(Role::Server, 10);
    c.recv(syn(1, false)).unwrap();
    c.recv(syn(3, false)).unwrap();
    // A peer that never showed flow control (Go's) is not policed: backpressure bounds it.
    assert!(c.recv(data(1, 100_000, false)).unwrap().replies.is_empty());
    c.recv(Frame::WindowUpdate(WindowUpdate {
        stream_id: 0,
        delta: 1000,
    }))
    .unwrap();
    // One that did may fill the 64 KiB window, not go past it.
    assert!(c.recv(data(3, 65_536, false)).unwrap().replies.is_empty());
    let o = c.recv(data(3, 1, false)).unwrap();
    assert_eq!(
        o.event,
        Event::Reset {
            stream_id: 3,
            status: RstStatus::FlowControlError
        }
    );
    assert_eq!(
        o.replies,
        vec![Frame::RstStream(RstStream::new(
            3,
            RstStatus::FlowControlError
        ))]
    );
    assert_eq!(c.open_streams(), 1);
}

#[test]
fn send_windows_apply_only_once_the_peer_does_flow_control() {
    let mut c = Conn::new(Role::Server, 10);
    c.recv(syn(1, false)).unwrap();
    // Like spdystream: no SETTINGS, no WINDOW_UPDATE. Nothing stalls.
    assert_eq!(c.take_send_window(1, 1 << 20), Ok(1 << 20));
    c.recv(syn(3, false)).unwrap();
    c.recv(Frame::WindowUpdate(WindowUpdate {
        stream_id: 3,
        delta: 10,
    }))
    .unwrap();
    // Enforced now: stream 3 has 64 KiB + 10, the connection 64 KiB.
    assert_eq!(c.take_send_window(3, 1 << 20), Ok(65_536));
    assert_eq!(c.take_send_window(3, 1), Ok(0));
    let o = c
        .recv(Frame::WindowUpdate(WindowUpdate {
            stream_id: 0,
            delta: 100,
        }))
        .unwrap();
    assert_eq!(o.event, Event::WindowOpened);
    assert_eq!(c.take_send_window(3, 1000), Ok(10));
}

#[test]
fn settings_move_every_stream_window() {
    let mut c = Conn::new(Role::Server, 10);
    c.recv(syn(1, false)).unwrap();
    let s = Settings {
        clear: false,
        entries: vec![crate::stream::spdy::frame::Setting {
            flags: 0,
            id: settings::INITIAL_WINDOW_SIZE,
            value: 1000,
        }],
    };
    c.recv(Frame::Settings(s)).unwrap();
    assert_eq!(c.take_send_window(1, 5000), Ok(1000));
}

#[test]
fn window_overflow_resets_the_stream_or_ends_the_connection() {
    let mut c = Conn::new(Role::Server, 10);
    c.recv(syn(1, false)).unwrap();
    let big = |stream_id| {
        Frame::WindowUpdate(WindowUpdate {
            stream_id,
            delta: 0x7fff_ffff,
        })
    };
    let o = c.recv(big(1)).unwrap();
    assert_eq!(
        o.replies,
        vec![Frame::RstStream(RstStream::new(
            1,
            RstStatus::FlowControlError
        ))]
    );
    assert!(c.recv(big(0)).is_err());
}

#[test]
fn a_client_opens_odd_streams_and_takes_one_reply() {
    let mut c = Conn::new(Role::Client, 10);
    let Frame::SynStream(s) = c.open(HeaderBlock::new(), false).unwrap() else {
        panic!()
    };
    assert_eq!(s.stream_id, 1);
    let reply = |fin| {
        Frame::SynReply(SynReply {
            stream_id: 1,
            fin,
            headers: HeaderBlock::new(),
        })
    };
    assert_eq!(
        c.recv(reply(false)).unwrap().event,
        Event::Replied {
            stream_id: 1,
            fin: false
        }
    );
    let o = c.recv(reply(false)).unwrap();
    assert_eq!(
        o.replies,
        vec![Frame::RstStream(RstStream::new(1, RstStatus::StreamInUse))]
    );
}

#[test]
fn an_advertised_window_is_replenished_at_its_half() {
    let mut c = Conn::new(Role::Server, 10);
    let frames = c.advertise_recv_window(1 << 20);
    let settings = match &frames[0] {
        Frame::Settings(s) => s.get(settings::INITIAL_WINDOW_SIZE),
        other => panic!("{other:?}"),
    };
    assert_eq!(settings, Some(1 << 20));
    assert_eq!(frames[1], window_update(0, (1 << 20) - DEFAULT_WINDOW));
    c.recv(syn(1, false)).unwrap();
    // 32 KiB frames: no update until half the window (512 KiB) is consumed, then one each.
    for _ in 0..16 {
        assert!(
            c.recv(data(1, 32 * 1024, false))
                .unwrap()
                .replies
                .is_empty()
        );
    }
    for _ in 0..15 {
        assert!(c.consumed(1, 32 * 1024).is_empty());
    }
    assert_eq!(
        c.consumed(1, 32 * 1024),
        vec![window_update(0, 512 * 1024), window_update(1, 512 * 1024)]
    );
}
