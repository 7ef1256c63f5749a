/**
 * backend-server is a pod's application in the kernel tier: it runs inside a
 * backend namespace and answers on every TCP and UDP port it is given with its
 * own name and the client address it saw, so a test can tell which endpoint a
 * connection reached and whether its source was rewritten on the way.
 *
 *   backend-server.ts NAME --tcp 8080,8081 --udp 9053 [--bulk 8090] [--ipv6]
 *
 * TCP: on connect it writes `{"name","peer","port"}\n`, then answers each line
 * it receives with `{"name","echo"}\n` (long-lived connections). UDP: each
 * datagram gets `{"name","peer","port"}` back. Bulk: the client writes a
 * byte count and a newline, and gets that many bytes of bulk-data.ts's stream
 * (written as fast as the reader takes them), then the end. It prints `ready` once every
 * port listens, and exits when its stdin closes, so a test runner that dies
 * leaves no server behind.
 */
import { createSocket } from 'node:dgram';
import { createServer, type Server, type Socket } from 'node:net';
import { bulkChunk } from './bulk-data.ts';

const [name, ...rest] = process.argv.slice(2);
if (!name) {
  process.stderr.write('usage: backend-server.ts NAME [--tcp P,P] [--udp P,P]\n');
  process.exit(2);
}
const ports = (flag: string): number[] => {
  const i = rest.indexOf(flag);
  return i >= 0 && rest[i + 1] ? rest[i + 1].split(',').map(Number) : [];
};
const plain = (addr: string | undefined) => (addr ?? '').replace(/^::ffff:/, '');
/** --ipv6: listen on :: (both families, a dual-stack pod) instead of 0.0.0.0. */
const ipv6 = rest.includes('--ipv6');
const any = ipv6 ? '::' : '0.0.0.0';

function tcp(port: number): Promise<Server> {
  const server = createServer((socket) => {
    socket.setEncoding('utf8');
    socket.on('error', () => {
      // A client reset is the client's business (connection tests reset on purpose).
    });
    socket.write(JSON.stringify({ name, peer: plain(socket.remoteAddress), port }) + '\n');
    let buf = '';
    socket.on('data', (chunk: string) => {
      buf += chunk;
      for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        socket.write(JSON.stringify({ name, echo: line }) + '\n');
      }
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port, host: any, ipv6Only: false }, () => resolve(server));
  });
}

function udp(port: number): Promise<void> {
  const sock = createSocket({ type: ipv6 ? 'udp6' : 'udp4', ipv6Only: false });
  sock.on('message', (_msg, rinfo) => {
    sock.send(JSON.stringify({ name, peer: plain(rinfo.address), port }), rinfo.port, rinfo.address);
  });
  return new Promise((resolve, reject) => {
    sock.once('error', reject);
    sock.bind(port, any, () => resolve());
  });
}

/** sendBulk writes `bytes` of the bulk stream, waiting for 'drain' whenever the socket's buffer is full. */
function sendBulk(socket: Socket, bytes: number): void {
  let off = 0;
  const pump = () => {
    while (off < bytes) {
      const c = bulkChunk(off, bytes - off);
      off += c.length;
      if (!socket.write(c)) return void socket.once('drain', pump);
    }
    socket.end();
  };
  pump();
}

function bulk(port: number): Promise<Server> {
  const server = createServer((socket) => {
    socket.on('error', () => {});
    let head = '';
    const onData = (chunk: Buffer) => {
      head += chunk.toString('latin1');
      const i = head.indexOf('\n');
      if (i < 0) return;
      socket.off('data', onData);
      sendBulk(socket, Number(head.slice(0, i)));
    };
    socket.on('data', onData);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port, host: any, ipv6Only: false }, () => resolve(server));
  });
}

await Promise.all([...ports('--tcp').map(tcp), ...ports('--udp').map(udp), ...ports('--bulk').map(bulk)]);
process.stdout.write('ready\n');
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
process.stdin.on('close', () => process.exit(0));
