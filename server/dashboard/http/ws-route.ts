import type { FastifyPluginAsync } from 'fastify';
import type { WebSocket } from 'ws';
import type { Clock, TimerHandle } from '../../clock.ts';
import { TooManyClientsError } from '../../errors.ts';
import type { DashboardAuth } from '../auth/auth.ts';
import type { Dashboard } from '../dashboard.ts';
import type { Viewer } from '../protocol.ts';
import { CLOSE_UNAUTHORIZED } from '../stream-hub.ts';
import { credentialOf, guard, remoteOf } from './guard.ts';

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
 * gets a plain HTTP 401/403 instead of a WebSocket, and so does a user who
 * holds their share of the connections already. While it is open, the
 * credential is checked again each time a review answer would expire: a
 * token that was revoked or lost its RBAC binding closes the stream
 * (CLOSE_UNAUTHORIZED). Dead peers are found with pings so their buffers do
 * not stay around.
 */
export const wsRoute: FastifyPluginAsync<WsRouteOptions> = async (app, opts) => {
  const { dashboard, auth, clock } = opts;
  const opened = new WeakMap<object, { viewer: Viewer; credential: string | null }>();
  app.get(
    '/ws',
    {
      websocket: true,
      schema: { querystring: { type: 'object', additionalProperties: false } },
      preValidation: async (req) => {
        const viewer = await guard(req, auth, 'view', false);
        if (dashboard.stream.hub.full || dashboard.stream.hub.fullFor(viewer.user)) {
          dashboard.stream.connectionsRefused++;
          if (dashboard.stream.hub.full) throw new TooManyClientsError('too many dashboard connections; close another tab and retry');
          throw new TooManyClientsError(`user ${viewer.user} already has ${dashboard.stream.hub.maxPerUser} dashboard connections open; close one and retry`);
        }
        opened.set(req, { viewer, credential: credentialOf(req) });
      },
    },
    (socket: WebSocket, req) => {
      const { viewer, credential } = opened.get(req)!;
      const remote = remoteOf(req);
      const client = dashboard.stream.connect(socket, viewer, remote);
      if (!client) return;
      let alive = true;
      let timer: TimerHandle | null = null;
      // A stream outlives the review answer it was opened with: ask again whenever that answer would have expired.
      let recheck: TimerHandle | null = null;
      const reauthorize = async () => {
        recheck = null;
        const outcome = await auth.check(credential, 'view', remote);
        if (client.closed) return;
        if (!outcome.ok) {
          dashboard.daemon.logger.child('dashboard').info('closing a dashboard stream: its credential no longer grants viewing', { user: viewer.user, from: remote, code: outcome.error.code });
          dashboard.stream.disconnect(client);
          socket.close(CLOSE_UNAUTHORIZED, outcome.error.code);
          return;
        }
        recheck = clock.setTimeout(() => void reauthorize(), auth.cacheTtlMs);
      };
      if (auth.enabled) recheck = clock.setTimeout(() => void reauthorize(), auth.cacheTtlMs);
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
        if (!isBinary) dashboard.stream.receive(client, data.toString());
      });
      socket.on('close', () => {
        if (timer) clock.clearTimeout(timer);
        if (recheck) clock.clearTimeout(recheck);
        dashboard.stream.disconnect(client);
      });
    },
  );
};
