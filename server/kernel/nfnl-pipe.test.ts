import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../log.ts';
import { FrameReader, MAX_ANSWER_FRAME, NfnlPipeError, NfnlPipeGoneError, PROTOCOL_VERSION, startNfnlPipe, type NfnlPipe } from './nfnl-pipe.ts';

/** frame: one answer frame as the helper writes it. */
function frame(kind: string, payload: Buffer | number[]): Buffer {
  const p = Buffer.from(payload);
  const head = Buffer.alloc(8);
  head.writeUInt32LE(p.length, 0);
  head.write(kind, 4, 'latin1');
  return Buffer.concat([head, p]);
}

const i32 = (v: number) => {
  const b = Buffer.alloc(4);
  b.writeInt32LE(v, 0);
  return b;
};

describe('FrameReader', () => {
  it('cuts frames out of bytes however they arrive, one byte at a time included', () => {
    const stream = Buffer.concat([frame('E', i32(2)), frame('D', Buffer.from('datagram')), frame('F', [1, 0, 0, 0, 20, 0, 0, 0]), frame('D', [])]);
    for (const step of [1, 3, 7, stream.length]) {
      const r = new FrameReader();
      const got: string[] = [];
      for (let i = 0; i < stream.length; i += step) for (const f of r.push(stream.subarray(i, i + step))) got.push(`${f.kind}:${f.payload.toString('hex')}`);
      expect(got).toEqual(['E:02000000', `D:${Buffer.from('datagram').toString('hex')}`, 'F:0100000014000000', 'D:']);
    }
  });

  it('refuses a frame of an unknown kind or of the wrong size for its kind', () => {
    expect(() => new FrameReader().push(frame('Z', [1]))).toThrow(NfnlPipeGoneError);
    expect(() => new FrameReader().push(frame('Z', [1]))).toThrow('an answer frame of unknown kind 0x5a');
    expect(() => new FrameReader().push(frame('E', [1, 2, 3, 4, 5]))).toThrow("an 'E' frame of 5 bytes (it has 4)");
    expect(() => new FrameReader().push(frame('F', [1, 2, 3, 4]))).toThrow("an 'F' frame of 4 bytes (it has 8)");
  });

  it('refuses a length past MAX_ANSWER_FRAME from its header alone, without waiting for the bytes', () => {
    const head = Buffer.alloc(8);
    head.writeUInt32LE(0xffffffff, 0);
    head.write('D', 4, 'latin1');
    expect(() => new FrameReader().push(head)).toThrow(`a 'D' frame of 4294967295 bytes (at most ${MAX_ANSWER_FRAME})`);
  });
});

/**
 * FAKE_HELPER: a stand-in for nfnl-pipe (run by this Node), speaking the
 * frame protocol; argv[1] picks its behaviour. Requests are read whole and
 * answered by kind.
 */
const FAKE_HELPER = `
const mode = process.argv[1];
const frame = (kind, p) => { const h = Buffer.alloc(8); h.writeUInt32LE(p.length, 0); h.write(kind, 4, 'latin1'); process.stdout.write(Buffer.concat([h, p])); };
const i32 = (v) => { const b = Buffer.alloc(4); b.writeInt32LE(v, 0); return b; };
frame('E', i32(mode === 'v1' ? 1 : ${PROTOCOL_VERSION}));
let buf = Buffer.alloc(0);
process.stdin.on('data', (d) => {
  buf = Buffer.concat([buf, d]);
  while (buf.length >= 8 && buf.length >= 8 + buf.readUInt32LE(0)) {
    const kind = String.fromCharCode(buf[4]);
    buf = buf.subarray(8 + buf.readUInt32LE(0));
    if (mode === 'garbage') frame('Z', Buffer.from('?'));
    else if (mode === 'foreign') {
      for (let pid = 1; pid <= 5; pid++) { const f = Buffer.alloc(8); f.writeUInt32LE(4000 + pid, 0); f.writeUInt32LE(36, 4); frame('F', f); }
      frame('D', Buffer.from('reply'));
      frame('E', i32(0));
    } else if (mode === 'silent-kernel' && kind === 'Q') frame('E', i32(-110));
    else frame('E', i32(0));
  }
});
process.stdin.on('end', () => process.exit(0));
`;

const pipes: NfnlPipe[] = [];
afterEach(() => {
  for (const p of pipes.splice(0)) p.close();
});

async function fake(mode: string, opts: { lines?: string[]; replyTimeoutMs?: number } = {}): Promise<NfnlPipe> {
  const logger = createLogger({ write: (l) => opts.lines?.push(l) });
  const p = await startNfnlPipe(mode, { prefix: [process.execPath, '-e', FAKE_HELPER], logger, ...(opts.replyTimeoutMs ? { replyTimeoutMs: opts.replyTimeoutMs } : {}) });
  pipes.push(p);
  return p;
}

describe('startNfnlPipe (over a stand-in helper process)', () => {
  it('refuses a helper of another protocol version (an older build)', async () => {
    const err = await fake('v1').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NfnlPipeGoneError);
    expect((err as Error).message).toContain(`protocol 1 at start where protocol ${PROTOCOL_VERSION} was expected`);
  });

  it('counts and logs the datagrams the helper dropped as foreign, at 1, 2 and 4 of them, and still answers', async () => {
    const lines: string[] = [];
    const p = await fake('foreign', { lines });
    expect((await p.requests(Buffer.alloc(16))).map((b) => b.toString())).toEqual(['reply']);
    expect(p.foreignDatagrams).toBe(5);
    const logged = lines.filter((l) => l.includes('dropped a netlink datagram that did not come from the kernel'));
    expect(logged.map((l) => /senderPortId=(\d+) .*droppedSoFar=(\d+)/.exec(l)!.slice(1).join(' '))).toEqual(['4001 1', '4002 2', '4004 4']);
  });

  it('stops a helper that answers out of protocol: the request fails, and so does every later one', async () => {
    const p = await fake('garbage');
    const err = await p.batch(Buffer.alloc(20)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NfnlPipeGoneError);
    expect((err as Error).message).toContain('an answer frame of unknown kind 0x5a');
    expect(p.alive).toBe(false);
    await expect(p.requests(Buffer.alloc(16))).rejects.toBeInstanceOf(NfnlPipeGoneError);
  });

  it('says plainly when the kernel left a request unanswered, and keeps the helper', async () => {
    const p = await fake('silent-kernel', { replyTimeoutMs: 1500 });
    const err = await p.requests(Buffer.alloc(16)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NfnlPipeError);
    expect(err).not.toBeInstanceOf(NfnlPipeGoneError);
    expect((err as Error).message).toBe('netlink request failed: ETIMEDOUT (the kernel did not answer within 1500 ms)');
    expect(p.alive).toBe(true);
    expect(await p.batch(Buffer.alloc(20))).toEqual([]);
  });

  it('is not alive once closed, and refuses requests then', async () => {
    const p = await fake('ok');
    expect(p.alive).toBe(true);
    p.close();
    expect(p.alive).toBe(false);
    await expect(p.batch(Buffer.alloc(20))).rejects.toThrow('was closed');
  });
});
