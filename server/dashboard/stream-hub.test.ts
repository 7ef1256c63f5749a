import { describe, expect, it } from 'vitest';
import { MemoryLog } from '../log.ts';
import { CLOSE_SLOW_CLIENT, CLOSE_TOO_MANY, StreamHub, type HubSocket } from './stream-hub.ts';

class FakeSocket implements HubSocket {
  bufferedAmount = 0;
  sent: string[] = [];
  closed: { code?: number; reason?: string } | null = null;
  send(data: string): void {
    this.sent.push(data);
  }
  close(code?: number, reason?: string): void {
    this.closed = { code, reason };
  }
  seqs(): number[] {
    return this.sent.map((s) => JSON.parse(s).seq);
  }
}

const viewer = { authMode: 'off' as const, user: 'anonymous', canAct: true };

describe('StreamHub', () => {
  it("numbers each client's messages from 1 and puts seq first", () => {
    const hub = new StreamHub({ logger: new MemoryLog().logger });
    const a = new FakeSocket();
    const b = new FakeSocket();
    const ca = hub.add(a, viewer, 'a')!;
    hub.send(ca, { type: 'snapshot', x: 1 }, 'essential');
    hub.add(b, viewer, 'b');
    hub.broadcast({ type: 'event', y: 2 }, 'droppable');
    expect(a.sent).toEqual(['{"seq":1,"type":"snapshot","x":1}', '{"seq":2,"type":"event","y":2}']);
    expect(b.sent).toEqual(['{"seq":1,"type":"event","y":2}']);
  });

  it('skips droppable messages for a client past the soft limit, leaving a hole in seq that asks for a snapshot', () => {
    const hub = new StreamHub({ logger: new MemoryLog().logger, softLimitBytes: 100, hardLimitBytes: 1000 });
    const s = new FakeSocket();
    const c = hub.add(s, viewer, 'a')!;
    hub.broadcast({ type: 'sync' }, 'droppable');
    s.bufferedAmount = 500;
    hub.broadcast({ type: 'sync' }, 'droppable');
    hub.send(c, { type: 'snapshot' }, 'essential');
    s.bufferedAmount = 0;
    hub.broadcast({ type: 'sync' }, 'droppable');
    expect(s.seqs()).toEqual([1, 3, 4]);
    expect(c.skipped).toBe(1);
  });

  it('disconnects a client past the hard limit with a close code, counts and logs it, and sends it nothing more', () => {
    const log = new MemoryLog();
    const hub = new StreamHub({ logger: log.logger, softLimitBytes: 100, hardLimitBytes: 1000 });
    const s = new FakeSocket();
    hub.add(s, viewer, '10.0.0.7');
    s.bufferedAmount = 5000;
    hub.broadcast({ type: 'sync' }, 'essential');
    expect(s.closed).toEqual({ code: CLOSE_SLOW_CLIENT, reason: 'KPROXY_ERR_SLOW_CLIENT: too far behind, reconnect' });
    expect(hub.size).toBe(0);
    expect(hub.slowDropped).toBe(1);
    expect(log.lines('warn')[0]).toMatch(/dashboard client 10\.0\.0\.7 \(anonymous\) fell 5 KiB behind; disconnected code=KPROXY_ERR_SLOW_CLIENT/);
    hub.broadcast({ type: 'sync' }, 'essential');
    expect(s.sent).toEqual([]);
  });

  it('refuses connections beyond maxClients', () => {
    const hub = new StreamHub({ logger: new MemoryLog().logger, maxClients: 1 });
    expect(hub.add(new FakeSocket(), viewer, 'a')).not.toBeNull();
    const extra = new FakeSocket();
    expect(hub.add(extra, viewer, 'b')).toBeNull();
    expect(extra.closed?.code).toBe(CLOSE_TOO_MANY);
  });

  it('says goodbye to everyone when the daemon stops', () => {
    const hub = new StreamHub({ logger: new MemoryLog().logger });
    const s = new FakeSocket();
    hub.add(s, viewer, 'a');
    hub.closeAll();
    expect(s.closed).toEqual({ code: 1001, reason: 'kproxy is stopping' });
    expect(hub.size).toBe(0);
  });
});
