import { describe, expect, it } from 'vitest';
import { overview } from '../testing/fixtures.ts';
import { Connection, tokenProtocol, type SocketLike, type Timers } from './connection.svelte.ts';
import { CLOSE_UNAUTHORIZED, type ServerMessage } from './protocol.ts';

class FakeSocket implements SocketLike {
  readyState = 0;
  onopen: SocketLike['onopen'] = null;
  onmessage: SocketLike['onmessage'] = null;
  onclose: SocketLike['onclose'] = null;
  onerror: SocketLike['onerror'] = null;
  sent: string[] = [];
  readonly url: string;
  readonly protocols: string[];
  constructor(url: string, protocols: string[]) {
    this.url = url;
    this.protocols = protocols;
  }
  send(d: string) {
    this.sent.push(d);
  }
  close() {
    this.readyState = 3;
  }
  open() {
    this.readyState = 1;
    this.onopen?.({});
  }
  deliver(m: object) {
    this.onmessage?.({ data: JSON.stringify(m) });
  }
  drop(code = 1006, reason = '') {
    this.readyState = 3;
    this.onclose?.({ code, reason });
  }
}

class FakeTimers implements Timers {
  t = 0;
  timers: { at: number; fn: () => void; id: number }[] = [];
  id = 0;
  now() {
    return this.t;
  }
  setTimeout(fn: () => void, ms: number) {
    const id = ++this.id;
    this.timers.push({ at: this.t + ms, fn, id });
    return id;
  }
  clearTimeout(h: unknown) {
    this.timers = this.timers.filter((x) => x.id !== h);
  }
  advance(ms: number) {
    this.t += ms;
    for (;;) {
      const due = this.timers.filter((x) => x.at <= this.t).sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      this.timers = this.timers.filter((x) => x !== due);
      due.fn();
    }
  }
}

function setup(token: string | null = 'tok') {
  const sockets: FakeSocket[] = [];
  const got: ServerMessage[] = [];
  const timers = new FakeTimers();
  let refused = 0;
  const c = new Connection({
    url: 'ws://h/ws',
    token: () => token,
    onMessage: (m) => got.push(m),
    onRefused: () => refused++,
    socket: (url, protocols) => {
      const s = new FakeSocket(url, protocols);
      sockets.push(s);
      return s;
    },
    timers,
    staleAfterMs: 15_000,
  });
  return { c, sockets, got, timers, refused: () => refused };
}

const snap = (seq: number) => ({
  type: 'snapshot',
  seq,
  viewer: { authMode: 'off', user: 'anonymous', canAct: true },
  overview: overview(),
  services: [],
  syncs: [],
  events: [],
  drift: { checkedAt: null, total: 0, findings: [] },
  lastAction: null,
});
const ev = (seq: number) => ({ type: 'event', seq, event: { seq, time: 0, type: 'Normal', reason: 'X', action: 'Y', object: 'Node n', note: '' } });

describe('Connection', () => {
  it('offers the dashboard subprotocol and the token as a base64url bearer subprotocol', () => {
    const { c, sockets } = setup('a+b/c=');
    c.start();
    expect(sockets[0].protocols).toEqual(['kproxy.dashboard.v1', tokenProtocol('a+b/c=')]);
    expect(tokenProtocol('a+b/c=')).toBe('base64url.bearer.authorization.k8s.io.YStiL2M9');
  });

  it('passes messages on in seq order and goes live on the snapshot', () => {
    const { c, sockets, got } = setup();
    c.start();
    expect(c.state).toBe('connecting');
    sockets[0].open();
    sockets[0].deliver(snap(1));
    sockets[0].deliver(ev(2));
    sockets[0].deliver(ev(3));
    expect(c.state).toBe('live');
    expect(got.map((m) => `${m.type}${m.seq}`)).toEqual(['snapshot1', 'event2', 'event3']);
  });

  it('on a gap in seq drops messages and asks for a snapshot, then carries on from it', () => {
    const { c, sockets, got } = setup();
    c.start();
    const s = sockets[0];
    s.open();
    s.deliver(snap(1));
    s.deliver(ev(2));
    s.deliver(ev(5));
    s.deliver(ev(6));
    expect(c.gaps).toBe(1);
    expect(s.sent).toEqual(['{"type":"snapshot"}']);
    s.deliver(snap(7));
    s.deliver(ev(8));
    expect(got.map((m) => `${m.type}${m.seq}`)).toEqual(['snapshot1', 'event2', 'snapshot7', 'event8']);
  });

  it('reconnects with growing delays and starts over with a snapshot', () => {
    const { c, sockets, timers, got } = setup();
    c.start();
    sockets[0].open();
    sockets[0].deliver(snap(1));
    sockets[0].drop();
    expect(c.state).toBe('reconnecting');
    timers.advance(499);
    expect(sockets).toHaveLength(1);
    timers.advance(1);
    expect(sockets).toHaveLength(2);
    sockets[1].drop();
    timers.advance(999);
    expect(sockets).toHaveLength(2);
    timers.advance(1);
    expect(sockets).toHaveLength(3);
    sockets[2].open();
    sockets[2].deliver(ev(1));
    sockets[2].deliver(snap(2));
    expect(got.map((m) => `${m.type}${m.seq}`)).toEqual(['snapshot1', 'snapshot2']);
    expect(c.state).toBe('live');
  });

  it('turns stale when an open stream goes quiet, and live again with the next message', () => {
    const { c, sockets, timers } = setup();
    c.start();
    sockets[0].open();
    sockets[0].deliver(snap(1));
    timers.advance(14_000);
    expect(c.state).toBe('live');
    timers.advance(1_000);
    expect(c.state).toBe('stale');
    sockets[0].deliver(ev(2));
    expect(c.state).toBe('live');
  });

  it('says the server refuses it when sockets close before opening, twice in a row', () => {
    const { c, sockets, timers, refused } = setup();
    c.start();
    sockets[0].drop();
    expect(refused()).toBe(0);
    timers.advance(500);
    sockets[1].drop();
    expect(refused()).toBe(1);
  });

  it('says the server refuses it at once when an open stream is closed because its credential no longer grants viewing', () => {
    const { c, sockets, refused } = setup();
    c.start();
    sockets[0].open();
    sockets[0].deliver(snap(1));
    sockets[0].drop(CLOSE_UNAUTHORIZED, 'KPROXY_ERR_FORBIDDEN');
    expect(refused()).toBe(1);
  });

  it('reconnects without calling it refused when an open stream just drops', () => {
    const { c, sockets, refused } = setup();
    c.start();
    sockets[0].open();
    sockets[0].drop();
    expect(refused()).toBe(0);
    expect(c.state).toBe('reconnecting');
  });
});
