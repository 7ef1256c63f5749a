import type { FastifyPluginAsync } from 'fastify';
import type { WebSocket } from 'ws';
import type { Clock, TimerHandle } from '../../clock.ts';
import { TooManyClientsError } from '../../errors.ts';
import type { DashboardAuth } from '../auth/auth.ts';
import type { Dashboard } from '../dashboard.ts';
import type { Viewer } from '../protocol.ts';
import { guard, remoteOf } from './guard.ts';

export interface WsRouteOptions {
  dashboard: Dashboard;
  auth: DashboardAuth;
  clock: Clock;
  /** pingIntervalMs: a connection that misses a pong for this long is ended (default 30 s). */
  pingIntervalMs?: number;
}

/**
 * wsRoute is /ws, the live stream. The upgrade is checked like an API read
 * (Host with auth off, Origin always, bearer token from the Authorization
 * header or the WebSocket subprotocol) before it happens; a refused upgrade
 * gets a plain HTTP 401/403 instead of a WebSocket. Dead peers are found with
 * pings so their buffers do not stay around.
 */
export const wsRoute: FastifyPluginAsync<WsRouteOptions> = async (app, opts) => {
  const { dashboard, auth, clock } = opts;
  const viewers = new WeakMap<object, Viewer>();
  app.get(
    '/ws',
    {
      websocket: true,
      schema: { querystring: { type: 'object', additionalProperties: false } },
      preValidation: async (req) => {
        const viewer = await guard(req, auth, 'view', true);
        if (dashboard.hub.full) throw new TooManyClientsError('too many dashboard connections; close another tab and retry');
        viewers.set(req, viewer);
      },
    },
    (socket: WebSocket, req) => {
      const client = dashboard.connect(socket, viewers.get(req)!, remoteOf(req));
      if (!client) return;
      let alive = true;
      let timer: TimerHandle | null = null;
      const every = opts.pingIntervalMs ?? 30_000;
      const ping = () => {
        if (!alive) {
          socket.terminate();
          return;
        }
        alive = false;
        socket.ping();
        timer = clock.setTimeout(ping, every);
      };
      timer = clock.setTimeout(ping, every);
      socket.on('pong', () => (alive = true));
      socket.on('message', (data, isBinary) => {
        alive = true;
        if (!isBinary) dashboard.receive(client, data.toString());
      });
      socket.on('close', () => {
        if (timer) clock.clearTimeout(timer);
        dashboard.disconnect(client);
      });
    },
  );
};
