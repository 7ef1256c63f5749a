import { FakeClock } from '../../clock-fake.ts';
import { testConfig } from '../../config/testing.ts';
import type { ProxyConfig } from '../../config/types.ts';
import { MemoryEventRecorder } from '../../events/memory-event-recorder.ts';
import type { IptablesRunner } from '../../kernel/iptables.ts';
import { SimulatedIptables } from '../../kernel/iptables-simulated.ts';
import { FakeNetInterfaces } from '../../kernel/netif-fake.ts';
import type { TcpStream } from '../../kernel/sockets.ts';
import { SimulatedSockets } from '../../kernel/sockets-simulated.ts';
import { silentLogger, type Logger } from '../../log.ts';
import { cleanupIptables } from '../xtables/cleanup.ts';
import { createUserspaceBackend, type UserspaceBackend } from './proxier.ts';

/** Test helpers for the userspace backend: the proxier over a simulated iptables and an in-memory network. */

export interface UserspaceHarness {
  backend: UserspaceBackend;
  iptables: SimulatedIptables;
  net: SimulatedSockets;
  netif: FakeNetInterfaces;
  clock: FakeClock;
  events: MemoryEventRecorder;
}

/** userspaceConfig is the default configuration in userspace mode, with overrides of its userspace section. */
export function userspaceConfig(over: Partial<ProxyConfig['userspace']> = {}, rest: Partial<ProxyConfig> = {}): ProxyConfig {
  const base = testConfig({ mode: 'userspace', ...rest });
  return { ...base, userspace: { ...base.userspace, ...over } };
}

/** harness builds a userspace backend; random 0 keeps every rotation in sorted order. */
export function harness(
  opts: {
    config?: ProxyConfig;
    nodeName?: string;
    logger?: Logger;
    random?: () => number;
    afterFirstSync?: () => Promise<unknown>;
    /** iptables: what the backend programs through instead of the simulated kernel itself (tests put a lossy writer in front). */
    iptables?: (k: SimulatedIptables) => IptablesRunner;
  } = {},
): UserspaceHarness {
  const iptables = new SimulatedIptables();
  const net = new SimulatedSockets({ nodeAddress: '10.0.0.10' });
  const netif = new FakeNetInterfaces();
  const clock = new FakeClock();
  const events = new MemoryEventRecorder({ clock, logger: silentLogger });
  const backend = createUserspaceBackend({
    config: opts.config ?? userspaceConfig(),
    nodeName: opts.nodeName ?? 'node-a',
    family: 'IPv4',
    iptables: opts.iptables?.(iptables) ?? iptables,
    sockets: net,
    netif,
    clock,
    logger: opts.logger ?? silentLogger,
    events,
    random: opts.random ?? (() => 0),
    cleanup: () => cleanupIptables({ runners: [iptables], logger: silentLogger }),
    afterFirstSync: opts.afterFirstSync,
  });
  return { backend, iptables, net, netif, clock, events };
}

/** EchoServer is an endpoint in the simulated network: it answers each line with its name and what it got. */
export interface EchoServer {
  readonly name: string;
  readonly accepted: TcpStream[];
  close(): void;
}

/** echoServer listens on ip:port and answers every chunk with "<name>:<chunk>". */
export async function echoServer(net: SimulatedSockets, name: string, ip: string, port: number): Promise<EchoServer> {
  const accepted: TcpStream[] = [];
  const l = await net.listenTcp(
    ip,
    port,
    (c) => {
      accepted.push(c);
      c.on('error', () => {});
      c.on('data', (d: Buffer) => c.write(`${name}:${d.toString()}`));
      c.on('end', () => c.end());
    },
    () => {},
  );
  return { name, accepted, close: () => l.close() };
}

/** request connects from a client address to the proxy port, sends text, and resolves with the first answer. */
export async function request(net: SimulatedSockets, from: string, port: number, text: string): Promise<string> {
  const c = await net.connectFrom(from, '10.0.0.10', port).connected;
  return new Promise((resolve, reject) => {
    c.on('error', reject);
    c.once('data', (d: Buffer) => {
      resolve(d.toString());
      c.end();
    });
    c.on('close', () => resolve(''));
    c.write(text);
  });
}

/** settle lets the in-memory network deliver (setImmediate hops) and the relay react. */
export async function settle(rounds = 10): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise((r) => setImmediate(r));
}
