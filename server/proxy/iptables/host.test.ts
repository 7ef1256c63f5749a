import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../clock-fake.ts';
import { CommandNotFoundError } from '../../errors.ts';
import type { ExecFn } from '../../kernel/exec.ts';
import { silentLogger } from '../../log.ts';
import { ep, makeService, makeSlice } from '../testing.ts';
import { cleanupIptablesHost, createHostIptablesBackend } from './host.ts';
import { stateFromObjects, testConfig } from './testing.ts';

describe('host wiring', () => {
  it('--dry-run programs the simulated kernel and runs no iptables binary', async () => {
    const ran: string[] = [];
    const exec: ExecFn = async (file, args) => {
      ran.push([file, ...args].join(' '));
      return { code: 0, stdout: '[]', stderr: '' };
    };
    const { backend, kernel, decision } = await createHostIptablesBackend({
      config: testConfig(),
      nodeName: 'node-a',
      flavor: 'auto',
      dryRun: true,
      clock: new FakeClock(),
      logger: silentLogger,
      exec,
    });
    expect(decision.reason).toMatch(/dry-run/);
    await backend.init!();
    const state = stateFromObjects('node-a', [makeService('ns', 'a', { clusterIP: '10.96.0.1' }), makeSlice('ns', 'a', 'a-1', [ep('10.244.0.1')])]);
    const r = await backend.sync({ state: state.checkout(), forceFull: true });
    expect(r.error).toBeUndefined();
    expect(await kernel!.save({ table: 'nat' })).toContain('-A KUBE-SERVICES -m comment --comment "ns/a:p80 cluster IP"');
    expect(ran.filter((c) => c.includes('iptables'))).toEqual([]);
  });

  it('--cleanup sweeps every flavour and family that exists, and the nftables tables', async () => {
    const restored: string[] = [];
    const nftInput: string[] = [];
    const exec: ExecFn = async (file, args, opts) => {
      if (file.startsWith('ip6tables')) throw new CommandNotFoundError(`${file} is not installed`);
      if (args[0] === '--version') return { code: 0, stdout: `${file} v1.8.9 (nf_tables)`, stderr: '' };
      if (file === 'iptables-nft-save') return { code: 0, stdout: '*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n', stderr: '' };
      if (file === 'iptables-nft-restore') {
        restored.push(String(opts?.stdin));
        return { code: 0, stdout: '', stderr: '' };
      }
      if (file === 'nft' && args.join(' ') === '-j list tables') {
        const tables = [{ table: { family: 'ip', name: 'kube-proxy', handle: 1 } }, { table: { family: 'ip', name: 'filter', handle: 2 } }];
        return { code: 0, stdout: JSON.stringify({ nftables: [{ metainfo: { version: '1.0.6', json_schema_version: 1 } }, ...tables] }), stderr: '' };
      }
      if (file === 'nft' && args.join(' ') === '-f -') {
        nftInput.push(String(opts?.stdin));
        return { code: 0, stdout: '', stderr: '' };
      }
      return { code: 1, stdout: '', stderr: `unexpected ${file}` };
    };
    const result = await cleanupIptablesHost({ logger: silentLogger, exec, exists: () => false });
    expect(result.errors).toEqual([]);
    // One chain and the one rule jumping to it.
    expect(result.removed).toEqual({ nat: 2, nftables: 1 });
    expect(restored).toEqual(['*nat\n:KUBE-SERVICES - [0:0]\n-D PREROUTING -j KUBE-SERVICES\n-X KUBE-SERVICES\nCOMMIT\n']);
    // Through nftables mode's own cleanup: kube-proxy's table only, someone else's stays.
    expect(nftInput).toEqual(['delete table ip kube-proxy\n']);
  });
});
