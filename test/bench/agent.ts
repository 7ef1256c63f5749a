/**
 * agent runs inside a benchmark namespace and does what the benchmark cannot
 * do from the root namespace: HTTP to the daemon's loopback listener, the
 * dashboard's WebSocket, TCP connects through a service. It reads one JSON
 * command per line on stdin and answers one JSON line per command on stdout
 * (same id); WebSocket messages are reported as lines with id "ws".
 * Run: ip netns exec NS node test/bench/agent.ts
 */
import { connect, createServer } from 'node:net';
import { createInterface } from 'node:readline';
import WebSocket from 'ws';

type Command =
  | { id: number; op: 'get'; url: string; token?: string }
  | { id: number; op: 'ws'; url: string }
  | { id: number; op: 'ws-close' }
  | { id: number; op: 'connect'; host: string; port: number; count: number }
  | { id: number; op: 'listen'; port: number };

const out = (o: object) => process.stdout.write(JSON.stringify(o) + '\n');
let socket: WebSocket | null = null;

/** get fetches url; token: a bearer token (the dashboard requires one when kproxy reads a cluster). */
async function get(url: string, token?: string): Promise<object> {
  const t0 = performance.now();
  const res = await fetch(url, token ? { headers: { authorization: `Bearer ${token}` } } : {});
  const body = await res.text();
  return { status: res.status, body, ms: performance.now() - t0, bytes: Buffer.byteLength(body) };
}

function openWs(url: string): Promise<object> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const ws = new WebSocket(url, ['kproxy.dashboard.v1']);
    socket = ws;
    let first = true;
    ws.on('message', (data: Buffer) => {
      const text = data.toString('utf8');
      let type = '?';
      let seq = -1;
      try {
        const m = JSON.parse(text) as { type?: string; seq?: number; sync?: { seq?: number } };
        type = m.type ?? '?';
        seq = m.sync?.seq ?? -1;
      } catch {
        // Not JSON: reported with type "?".
      }
      out({ id: 'ws', type, syncSeq: seq, bytes: data.length, at: Date.now(), ...(first ? { connectMs: performance.now() - t0 } : {}) });
      first = false;
    });
    ws.on('open', () => resolve({ open: true, ms: performance.now() - t0 }));
    ws.on('error', reject);
  });
}

/** connectTimes opens count TCP connections one after the other and returns each connect time (ms). */
async function connectTimes(host: string, port: number, count: number): Promise<object> {
  const times: number[] = [];
  let failures = 0;
  for (let i = 0; i < count; i++) {
    const t0 = process.hrtime.bigint();
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect({ host, port });
      s.setTimeout(2000, () => {
        s.destroy();
        resolve(false);
      });
      s.on('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
    if (ok) times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    else failures++;
  }
  return { times, failures };
}

/** listen accepts TCP connections on port (every address) and closes them: the data plane's backend. */
function listen(port: number): Promise<object> {
  return new Promise((resolve, reject) => {
    const server = createServer((s) => s.destroy());
    server.on('error', reject);
    server.listen(port, () => resolve({ listening: port }));
  });
}

async function run(c: Command): Promise<object> {
  switch (c.op) {
    case 'get':
      return get(c.url, c.token);
    case 'ws':
      return openWs(c.url);
    case 'ws-close':
      socket?.close();
      socket = null;
      return { closed: true };
    case 'connect':
      return connectTimes(c.host, c.port, c.count);
    case 'listen':
      return listen(c.port);
  }
}

for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const c = JSON.parse(line) as Command;
  try {
    out({ id: c.id, ok: true, ...(await run(c)) });
  } catch (err) {
    out({ id: c.id, ok: false, error: err instanceof Error ? err.message : String(err) });
  }
}
(socket as WebSocket | null)?.close();
