import type { TcpStream } from '../../kernel/sockets.ts';

/** RelayCounters are bumped as bytes pass (a connection's, its endpoint's and its port's figures). */
export interface RelayCounters {
  toEndpoint(n: number): void;
  toClient(n: number): void;
  /** halfClosed: one direction finished (a FIN was passed on), the other goes on. */
  halfClosed(): void;
}

/** TcpRelay is a running relay; close() cuts both sides (the drain limit). */
export interface TcpRelay {
  close(): void;
}

/**
 * relayTcp copies bytes between a client connection and its endpoint
 * connection until both directions have ended, the way a proxy must:
 *
 * - back-pressure both ways: when the receiving side's write buffer is full
 *   (write() returns false) the sending side is paused until 'drain', so at
 *   most one read chunk (64 KiB; 256 KiB from an endpoint, whose reads are
 *   lent: ../../kernel/lent-reads.ts) plus the writable high-water mark is
 *   held per direction, however slow the reader;
 * - half-close: a FIN from one side becomes end() on the other, and the other
 *   direction keeps flowing (both sockets allow half-open streams);
 * - errors close both sides: an error or a side closing before both
 *   directions ended (a reset, a crash) resets the other side too, so no
 *   socket is left open with nobody to talk to, and no peer takes a cut
 *   stream for a complete one.
 *
 * done() runs once, after both sockets closed.
 */
export function relayTcp(client: TcpStream, endpoint: TcpStream, counters: RelayCounters, done: () => void): TcpRelay {
  let closed = 0;
  let ended = 0;
  // A failure is passed on as a reset (not a FIN), so the other side cannot take a cut stream for a complete one.
  const reset = (s: TcpStream) => {
    if (!s.destroyed) s.resetAndDestroy();
  };
  const resetBoth = () => {
    reset(client);
    reset(endpoint);
  };
  const onEnd = () => {
    if (++ended === 1) counters.halfClosed();
  };
  pump(client, endpoint, (n) => counters.toEndpoint(n), onEnd);
  pump(endpoint, client, (n) => counters.toClient(n), onEnd);
  for (const [self, other] of [
    [client, endpoint],
    [endpoint, client],
  ] as const) {
    // The error itself needs no report here: the connection's end is counted by done().
    self.on('error', resetBoth);
    self.on('close', () => {
      // A side that closed before its two directions ended was reset or failed: the other side goes too.
      if (!(self.readableEnded && self.writableFinished)) reset(other);
      if (++closed === 2) done();
    });
  }
  return { close: resetBoth };
}

function pump(from: TcpStream, to: TcpStream, count: (n: number) => void, onEnd: () => void): void {
  if (from.lendReads) {
    // A lent chunk goes back to the pool when its write completed (or failed): the kernel has the bytes.
    from.lendReads((chunk, release) => {
      count(chunk.length);
      return to.write(chunk, release);
    });
  } else {
    from.on('data', (chunk: Buffer) => {
      count(chunk.length);
      if (!to.write(chunk)) from.pause();
    });
  }
  to.on('drain', () => from.resume());
  from.on('end', () => {
    onEnd();
    to.end();
  });
}
