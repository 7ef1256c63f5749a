import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { RunOptions } from './config/types.ts';
import { Daemon } from './daemon.ts';
import { MemoryEventRecorder } from './events/memory-event-recorder.ts';
import { MemoryLog } from './log.ts';
import { harness, testConfig } from './proxy/iptables/testing.ts';
import { FileSource } from './sources/file/file-source.ts';

const run: RunOptions = {
  configFile: null,
  kubeconfig: null,
  source: null,
  sourceIsDefault: false,
  once: true,
  cleanup: false,
  dryRun: true,
  dashboardTokenFile: null,
  dashboardBindAddress: null,
  dashboardTlsCertFile: null,
  dashboardTlsKeyFile: null,
  dashboardTokenAudience: 'kproxy-dashboard',
  iptablesFlavor: 'nft',
  version: false,
  help: false,
};

const web = `apiVersion: v1
kind: Service
metadata: { name: web, namespace: ns }
spec: { clusterIP: 10.96.0.10, ports: [{ name: http, port: 80 }] }
---
apiVersion: v1
kind: Service
metadata: { name: bad, namespace: ns }
spec: { clusterIP: 10.96.0.300, ports: [{ name: http, port: 80 }] }
`;

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kproxy-daemon-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

function onceDaemon() {
  const log = new MemoryLog();
  const h = harness({ logger: log.logger });
  const source = new FileSource({ path: dir, nodeName: 'node-a', clock: h.clock, logger: log.logger, watch: false });
  const events = new MemoryEventRecorder({ clock: h.clock, logger: log.logger });
  const daemon = new Daemon({ config: testConfig(), run, nodeName: 'node-a', logger: log.logger, clock: h.clock, backend: h.backend, source, events });
  return { daemon, ...h };
}

describe('Daemon.once', () => {
  it('touches nothing when the source cannot be read completely: no sysctl, no iptables call', async () => {
    await writeFile(join(dir, 'a.yaml'), web);
    await writeFile(join(dir, 'b.json'), '{ broken\n');
    const { daemon, kernel, sysctl } = onceDaemon();
    await expect(daemon.once()).rejects.toMatchObject({ code: 'KPROXY_ERR_SOURCE_NOT_SYNCED', message: expect.stringMatching(/b\.json:2:1: invalid YAML/) });
    expect(kernel.calls).toEqual([]);
    expect(sysctl.writes).toEqual([]);
  });

  it('programs the valid objects and keeps the invalid ones aside, with why', async () => {
    await writeFile(join(dir, 'a.yaml'), web);
    const { daemon, kernel } = onceDaemon();
    const rec = await daemon.once();
    expect(rec.ok).toBe(true);
    expect(kernel.callsOf('iptables-restore')).not.toHaveLength(0);
    expect(await kernel.save({})).toMatch(/ns\/web:http has no endpoints/);
    expect([...daemon.state.invalid.values()]).toEqual([expect.stringMatching(/^Service ns\/bad: .*"10\.96\.0\.300"/)]);
  });
});
