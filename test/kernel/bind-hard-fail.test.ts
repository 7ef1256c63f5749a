import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { writeShippedConfig } from './harness/daemonset.ts';
import { withTestCluster } from './harness/diagnostics.ts';
import { CLI, HEALTHZ_PORT, kproxyArgs } from './harness/kproxy.ts';
import { ready, tcpPort, type ServiceSpec } from './harness/manifests.ts';
import { nsExec, nsRun } from './harness/netns.ts';
import { PODS } from './harness/plan.ts';

const SERVER = join(import.meta.dirname, 'harness/backend-server.ts');
const web: ServiceSpec = { name: 'web', clusterIP: '10.96.0.10', ports: tcpPort(80) };

/**
 * With the shipped ConfigMap (bindAddressHardFail: true), a node where
 * something still holds :10256 (kube-proxy not yet taken out) gets no second
 * proxy: kproxy exits 1 naming the port, before it writes any rule, instead
 * of retrying every 5 s while programming the node beside the other proxy.
 */
describe.skipIf(!tiers().kernel.ok)('the shipped config.conf on a node whose :10256 is taken (real node namespace)', () => {
  it('exits 1 naming the taken port and writes no rule; once the port is free the same start serves', () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(PODS.a0, PODS.a1));
      const dir = mkdtempSync(join(tmpdir(), `kpt-${process.pid}-hardfail-`));
      try {
        const options = c.kproxyOptions('nft', ['--config', writeShippedConfig(dir)]);
        // What a kube-proxy still running on the node holds: a listener on every address, port 10256.
        const holder = c.processes.start('holder of :10256', c.ns.nodeA, [process.execPath, SERVER, 'kube-proxy', '--tcp', String(HEALTHZ_PORT)]);
        await new Promise<void>((resolve, reject) => {
          const stop = holder.log.onLine((line) => line === 'ready' && (stop(), resolve()));
          void holder.exited.then((code) => reject(new Error(`the port holder exited (${code}): ${holder.log.tail(10)}`)));
        });

        // Without the hard fail kproxy would still be retrying when the 30 s limit ends the command.
        const r = await nsExec(c.ns.nodeA, [process.execPath, CLI, ...kproxyArgs(options)], { timeoutMs: 30_000 });
        c.kproxy.log.push(`----- kproxy with :10256 taken\n${r.stderr}${r.stdout}----- exited ${r.code}\n`);
        expect(r.code, r.stderr).toBe(1);
        expect(r.stderr).toMatch(/cannot start: starting the healthz server on 0\.0\.0\.0:10256 failed: .*EADDRINUSE/);
        expect(r.stderr).not.toMatch(/retrying/);
        const save = await nsRun(c.ns.nodeA, ['iptables-nft-save']);
        expect(save.split('\n').filter((l) => l.includes('KUBE-'))).toEqual([]);

        // kube-proxy gone: the kubelet's next restart of the pod takes the node.
        await c.processes.stop(holder);
        await c.kproxy.start(options);
        expect((await c.client().tcp({ host: web.clusterIP, port: 80 }, 20)).backends).toEqual(['a0', 'a1']);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }));
});
