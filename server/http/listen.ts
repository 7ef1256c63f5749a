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

  const attempt = async (): Promise<void> => {
    timer = null;
    if (closed) return;
    try {
      await o.app.listen({ host, port: hp.port, backlog: LISTEN_BACKLOG });
      listening = true;
      const bound = o.app.server.address() as AddressInfo;
      o.logger.info(`${o.name} server listening`, { address: bound.family === 'IPv6' ? `[${bound.address}]:${bound.port}` : `${bound.address}:${bound.port}` });
    } catch (err) {
      const error = new ListenFailedError(`starting the ${o.name} server on ${o.address} failed: ${errorMessage(err)}`, { cause: err });
      if (o.hardFail) throw error;
      o.logger.error(`${error.message}; retrying`, { code: error.code, retryInMs: o.retryMs ?? 5_000 });
      timer = o.clock.setTimeout(() => void attempt().catch((e) => o.logger.error('listen retry failed', { err: errorMessage(e) })), o.retryMs ?? 5_000);
    }
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
