import { existsSync, mkdirSync, readdirSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { waitFor } from '../wait.ts';
import { CLI, curlIn } from './harness/kproxy.ts';
import { addNamespace, deleteNamespace, HARNESS_PREFIX, nsExec, nsRun } from './harness/netns.ts';
import { ProcessTracker } from './harness/processes.ts';

/**
 * --dashboard-bind-address takes a host name, and a name says nothing about
 * where it listens: "*.localhost" is an ordinary name to the resolver, which
 * maps it wherever the hosts file says. In a namespace of its own, whose
 * hosts file (`ip netns exec` mounts /etc/netns/NS/hosts over /etc/hosts for
 * the processes it starts, and only for them) maps evil.localhost to an
 * address on the namespace's lo that is not loopback and good.localhost to
 * 127.0.0.1, the real daemon judges the address it was bound to: the first
 * refuses to start without auth, the second serves.
 */
const ROUTABLE = '10.254.1.1';
const DASHBOARD_PORT = 10263;

describe.skipIf(!tiers().kernel.ok)('a dashboard bound by host name (real network namespace and resolver)', () => {
  it('refuses to start without auth when the name resolves to a non-loopback address, and serves when it resolves to loopback', async () => {
    const ns = `${HARNESS_PREFIX}dash-bind-name`;
    const etcNetns = '/etc/netns';
    const ownEtcNetns = !existsSync(etcNetns);
    const hostsDir = join(etcNetns, ns);
    const processes = new ProcessTracker();
    await addNamespace(ns);
    try {
      mkdirSync(hostsDir, { recursive: true });
      writeFileSync(join(hostsDir, 'hosts'), `127.0.0.1 localhost\n${ROUTABLE} evil.localhost\n127.0.0.1 good.localhost\n`);
      await nsRun(ns, ['ip', 'link', 'set', 'lo', 'up']);
      await nsRun(ns, ['ip', 'addr', 'add', `${ROUTABLE}/32`, 'dev', 'lo']);
      expect((await nsRun(ns, ['getent', 'hosts', 'evil.localhost'])).trim()).toMatch(new RegExp(`^${ROUTABLE.replaceAll('.', '\\.')}\\s+evil\\.localhost$`));

      const argv = (name: string) => [
        process.execPath,
        CLI,
        '--dry-run',
        '--hostname-override',
        'node-a',
        '--conntrack-max-per-core',
        '0',
        '--healthz-bind-address',
        '127.0.0.1:10256',
        '--metrics-bind-address',
        '127.0.0.1:10249',
        '--dashboard-bind-address',
        `${name}:${DASHBOARD_PORT}`,
      ];

      // evil.localhost: bound to 10.254.1.1, which is not loopback, and no auth: exit 1, naming what it was bound to.
      const refused = await nsExec(ns, argv('evil.localhost'), { timeoutMs: 60_000 });
      expect(refused.code, refused.stderr).toBe(1);
      expect(refused.stderr).toMatch(
        /cannot start: --dashboard-bind-address evil\.localhost:10263 is bound to 10\.254\.1\.1:10263, which is not loopback: it is reachable from the network and the dashboard there has no auth and no TLS/,
      );
      expect(refused.stderr).toMatch(/code=KPROXY_ERR_INSECURE_BIND/);
      expect(refused.stderr).not.toMatch(/dashboard server listening/);

      // good.localhost: bound to 127.0.0.1, served without auth.
      const good = processes.start('kproxy good.localhost', ns, argv('good.localhost'));
      const status = await waitFor(
        async () => {
          const r = await curlIn(ns, `http://127.0.0.1:${DASHBOARD_PORT}/api/v1/whoami`);
          return r.status === 200 ? r : null;
        },
        { what: 'the dashboard on good.localhost to answer', timeoutMs: 30_000 },
      ).catch((err: Error) => {
        throw new Error(`${err.message}\n${good.log.tail(40)}`);
      });
      expect(JSON.parse(status.body)).toEqual({ authMode: 'off', user: 'anonymous', canAct: true });
      expect(good.log.tail(200)).toMatch(/dashboard server listening address=127\.0\.0\.1:10263/);
    } finally {
      await processes.stopAll();
      await deleteNamespace(ns);
      rmSync(hostsDir, { recursive: true, force: true });
      if (ownEtcNetns && existsSync(etcNetns) && readdirSync(etcNetns).length === 0) rmdirSync(etcNetns);
    }
  });
});
