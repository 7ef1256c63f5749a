/**
 * backend-server is a pod's application in the kernel tier: it runs inside a
 * backend namespace and answers on every TCP and UDP port it is given with its
 * own name and the client address it saw, so a test can tell which endpoint a
 * connection reached and whether its source was rewritten on the way.
 *
 *   backend-server.ts NAME --tcp 8080,8081 --udp 9053 [--ipv6]
 *
 * TCP: on connect it writes `{"name","peer","port"}\n`, then answers each line
 * it receives with `{"name","echo"}\n` (long-lived connections). UDP: each
 * datagram gets `{"name","peer","port"}` back. It prints `ready` once every
 * port listens, and exits when its stdin closes, so a test runner that dies
 * leaves no server behind.
 */
import { createSocket } from 'node:dgram';
import { createServer, type Server } from 'node:net';

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

await Promise.all([...ports('--tcp').map(tcp), ...ports('--udp').map(udp)]);
process.stdout.write('ready\n');
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
process.stdin.on('close', () => process.exit(0));
