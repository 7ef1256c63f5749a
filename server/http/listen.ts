import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Clock, TimerHandle } from '../clock.ts';
import { errorMessage, ListenFailedError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { LISTEN_BACKLOG } from '../net/listen.ts';

/** parseHostPort splits "host:port" or "[v6]:port"; null when it is not one. */
export function parseHostPort(text: string): { host: string; port: number } | null {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(text);
  if (!m) return null;
  const port = Number(m[3]);
  if (port > 65535) return null;
  return { host: m[1] ?? m[2] ?? '', port };
}

export interface ServeOptions {
  /** name says which listener this is in logs and errors ("healthz", "metrics"). */
  name: string;
  app: FastifyInstance;
  /** address is "host:port" ("" host: every address). */
  address: string;
  /** hardFail: a bind failure is fatal (kube-proxy's bindAddressHardFail); otherwise retried. */
  hardFail: boolean;
  logger: Logger;
  clock: Clock;
  /** retryMs: wait between attempts when not hard-failing (kube-proxy: 5 s). */
  retryMs?: number;
  /**
   * checkBound judges where the listener really listens, once it does: every
   * address it is bound to (a host name is resolved only by listen()). When it
   * throws, the listener is closed before it served anything and serve fails
   * with that error, hard fail or not (a refusal is no bind failure to retry).
   * Until it has passed, a request is answered 503 without reaching a route.
   */
  checkBound?: (bound: readonly AddressInfo[]) => void;
}

/** Served is a listener that is up, or still retrying to come up. */
export interface Served {
  readonly name: string;
  /** address is where it listens, or null while it is not listening. */
  address(): AddressInfo | null;
  close(): Promise<void>;
}

/**
 * serve makes an app listen like kube-proxy's healthz and metrics servers: on
 * a bind failure it either fails (hard fail: the daemon exits before touching
 * anything else) or logs the failure and tries again every 5 seconds, so a
 * port held by a dying old kube-proxy is taken over once it is free.
 */
export async function serve(o: ServeOptions): Promise<Served> {
  const hp = parseHostPort(o.address);
  if (!hp) throw new ListenFailedError(`${o.name} server: bind address ${JSON.stringify(o.address)} is not host:port`);
  const host = hp.host === '' ? '0.0.0.0' : hp.host;
  let timer: TimerHandle | null = null;
  let closed = false;
  let listening = false;
  const { checkBound } = o;
  let approved = checkBound === undefined;
  if (!approved) {
    // A backstop: the check runs as soon as listen() resolves, before the loop takes a connection.
    o.app.addHook('onRequest', async (_req, reply) => {
      if (approved) return;
      return reply.code(503).header('connection', 'close').type('text/plain; charset=utf-8').send('503 not serving yet\n');
    });
  }

  const attempt = async (): Promise<void> => {
    timer = null;
    if (closed) return;
    try {
      await o.app.listen({ host, port: hp.port, backlog: LISTEN_BACKLOG });
    } catch (err) {
      const error = new ListenFailedError(`starting the ${o.name} server on ${o.address} failed: ${errorMessage(err)}`, { cause: err });
      if (o.hardFail) throw error;
      o.logger.error(`${error.message}; retrying`, { code: error.code, retryInMs: o.retryMs ?? 5_000 });
      timer = o.clock.setTimeout(() => void attempt().catch((e) => o.logger.error(`the ${o.name} server will not serve: ${errorMessage(e)}`)), o.retryMs ?? 5_000);
      return;
    }
    // Every address the app listens on (fastify may bind more than one); a pipe path is no address.
    const addresses = o.app.addresses().filter((a): a is AddressInfo => typeof a !== 'string');
    if (checkBound) {
      try {
        checkBound(addresses);
      } catch (err) {
        closed = true;
        await o.app.close();
        throw err;
      }
      approved = true;
    }
    listening = true;
    o.logger.info(`${o.name} server listening`, { address: addresses.map((b) => (b.family === 'IPv6' ? `[${b.address}]:${b.port}` : `${b.address}:${b.port}`)).join(',') });
  };
  await attempt();

  return {
    name: o.name,
    address: () => (listening ? (o.app.server.address() as AddressInfo) : null),
    close: async () => {
      closed = true;
      if (timer) o.clock.clearTimeout(timer);
      await o.app.close();
    },
  };
}
