import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseIptablesScript } from '../../kernel/iptables-save-parser.ts';
import { SimulatedIptables } from '../../kernel/iptables-simulated.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { runGoldenCase } from '../golden.ts';
import { iptablesGolden } from './golden.ts';
import { harness, testConfig } from './testing.ts';

/**
 * Cross-checks against kube-proxy's own expectations (pkg/proxy/iptables/
 * proxier_test.go). kube-proxy's tests compare restore input "modulo order":
 * the chains declared per table, the rules of each chain in order, and the
 * chains deleted. We compare the same way. kube-proxy's fake proxier uses the
 * mark "0x4000" where the real one prints "%#08x" ("0x00004000"); hex is
 * normalized as kube-proxy's own checks do (trimhex).
 */
interface Shape {
  chains: Record<string, string[]>;
  rules: Record<string, string[]>;
  deleted: Record<string, string[]>;
}

function shape(restoreInput: string): Shape {
  const out: Shape = { chains: {}, rules: {}, deleted: {} };
  for (const t of parseIptablesScript(restoreInput.replace(/0x0+([0-9a-f])/g, '0x$1')).tables) {
    // On a fresh node kproxy's first input also creates the canaries and the jumps from the
    // built-in chains (-I), which kube-proxy creates with separate commands: not compared here.
    if (t.name === 'mangle') continue;
    const chains = new Set<string>();
    const deleted: string[] = [];
    for (const e of t.entries) {
      if (e.kind === 'chain' && e.name === 'KUBE-PROXY-CANARY') continue;
      if (e.kind === 'chain') chains.add(e.name);
      else if (e.op === 'A') (out.rules[`${t.name}/${e.chain}`] ??= []).push(e.args.join(' '));
      else if (e.op === 'X') deleted.push(e.chain);
    }
    out.chains[t.name] = [...chains].sort();
    out.deleted[t.name] = deleted.sort();
  }
  return out;
}

const TESTDATA = join(import.meta.dirname, 'testdata');

describe('same rules as kube-proxy for the same input', () => {
  const upstreamCases = readdirSync(TESTDATA).filter((d) => existsSync(join(TESTDATA, d, 'upstream.rules')));

  it('has upstream fixtures', () => {
    expect(upstreamCases).toContain('upstream-overall');
  });

  for (const name of upstreamCases) {
    it(`${name}: full sync restore input matches upstream.rules`, async () => {
      const { result } = await runGoldenCase(iptablesGolden(), join(TESTDATA, name, 'input.yaml'));
      expect(shape(result.batch!)).toEqual(shape(readFileSync(join(TESTDATA, name, 'upstream.rules'), 'utf8')));
    });
  }

  it('TestSyncProxyRulesRepeated: partial syncs write only changed chains and delete stale ones', async () => {
    const kernel = new SimulatedIptables({ hasRandomFully: false });
    const h = harness({ config: testConfig({ clusterCIDRs: ['10.0.0.0/8'] }), nodeName: 'test-node', kernel });
    await h.backend.init!();
    const tcp = (name: string, port: number) => [{ name, port, protocol: 'TCP' }];
    const svc1 = makeService('ns1', 'svc1', { clusterIP: '172.30.0.41', ports: tcp('p80', 80) });
    const svc2 = makeService('ns2', 'svc2', { clusterIP: '172.30.0.42', ports: tcp('p8080', 8080) });
    const state = stateFromObjects('test-node', [
      svc1,
      svc2,
      makeSlice('ns1', 'svc1', 'svc1-1', [ep('10.0.1.1')], tcp('p80', 80)),
      makeSlice('ns2', 'svc2', 'svc2-1', [ep('10.0.2.1')], tcp('p8080', 8080)),
    ]);
    const sync = async () => {
      const r = await h.backend.sync({ state: state.checkout(), forceFull: false });
      expect(r.error).toBeUndefined();
      return shape(r.batch!);
    };
    const fixedFilter = {
      'filter/KUBE-FIREWALL': ['-m comment --comment block incoming localnet connections -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP'],
      'filter/KUBE-FORWARD': [
        '-m conntrack --ctstate INVALID -j DROP',
        '-m comment --comment kubernetes forwarding rules -m mark --mark 0x4000/0x4000 -j ACCEPT',
        '-m comment --comment kubernetes forwarding conntrack rule -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT',
      ],
      'nat/KUBE-MARK-MASQ': ['-j MARK --or-mark 0x4000'],
      'nat/KUBE-POSTROUTING': ['-m mark ! --mark 0x4000/0x4000 -j RETURN', '-j MARK --xor-mark 0x4000', '-m comment --comment kubernetes service traffic requiring SNAT -j MASQUERADE'],
    };
    const natFixed = ['KUBE-MARK-MASQ', 'KUBE-NODEPORTS', 'KUBE-POSTROUTING', 'KUBE-SERVICES'];
    const nodePortsTail = '-m comment --comment kubernetes service nodeports; NOTE: this must be the last rule in this chain -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS';
    const clusterIP = (n: string, ip: string, port: number, chain: string) => `-m comment --comment ${n} cluster IP -m tcp -p tcp -d ${ip} --dport ${port} -j ${chain}`;

    // First sync: full.
    const first = await sync();
    expect(first.chains.nat).toEqual([...natFixed, 'KUBE-SEP-SNQ3ZNILQDEJNDQO', 'KUBE-SEP-UHEGFW77JX3KXTOV', 'KUBE-SVC-2VJB64SDSIJUP5T6', 'KUBE-SVC-XPGD46QRK7WJZT7O'].sort());

    // Add svc3: its chains are written. kube-proxy also rewrites every fixed chain here
    // (its expected input); kproxy rewrites only the shared chain that changed,
    // KUBE-SERVICES, whole because it is small (README: Syncs, partial sync).
    const svc3 = makeService('ns3', 'svc3', { clusterIP: '172.30.0.43', ports: tcp('p80', 80) });
    const eps3 = makeSlice('ns3', 'svc3', 'svc3-1', [ep('10.0.3.1')], tcp('p80', 80));
    state.onService(null, svc3);
    state.onEndpointSlice(null, eps3);
    expect(await sync()).toEqual({
      chains: { nat: ['KUBE-SEP-BSWRHOQ77KEXZLNL', 'KUBE-SERVICES', 'KUBE-SVC-X27LE4BHSL4DOUIK'] },
      rules: {
        'nat/KUBE-SERVICES': [
          clusterIP('ns1/svc1:p80', '172.30.0.41', 80, 'KUBE-SVC-XPGD46QRK7WJZT7O'),
          clusterIP('ns2/svc2:p8080', '172.30.0.42', 8080, 'KUBE-SVC-2VJB64SDSIJUP5T6'),
          clusterIP('ns3/svc3:p80', '172.30.0.43', 80, 'KUBE-SVC-X27LE4BHSL4DOUIK'),
          nodePortsTail,
        ],
        'nat/KUBE-SEP-BSWRHOQ77KEXZLNL': ['-m comment --comment ns3/svc3:p80 -s 10.0.3.1 -j KUBE-MARK-MASQ', '-m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.3.1:80'],
        'nat/KUBE-SVC-X27LE4BHSL4DOUIK': [
          '-m comment --comment ns3/svc3:p80 cluster IP -m tcp -p tcp -d 172.30.0.43 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ',
          '-m comment --comment ns3/svc3:p80 -> 10.0.3.1:80 -j KUBE-SEP-BSWRHOQ77KEXZLNL',
        ],
      },
      deleted: { nat: [] },
    });
    // The fixed chains kproxy did not rewrite are still in the kernel as the full sync wrote them.
    for (const [key, rules] of Object.entries(fixedFilter)) {
      const [table, chain] = key.split('/');
      const held = kernel.dump().tables.get(table)!.chains.get(chain)!.rules;
      expect(held.map((r) => r.args.join(' ').replace(/0x0+([0-9a-f])/g, '0x$1'))).toEqual(rules);
    }

    // Delete svc2: its chains are flushed and deleted; nothing else is rewritten.
    state.onService(svc2, null);
    const afterDelete = await sync();
    expect(afterDelete.chains.nat).toEqual(['KUBE-SEP-UHEGFW77JX3KXTOV', 'KUBE-SERVICES', 'KUBE-SVC-2VJB64SDSIJUP5T6']);
    expect(afterDelete.deleted.nat).toEqual(['KUBE-SEP-UHEGFW77JX3KXTOV', 'KUBE-SVC-2VJB64SDSIJUP5T6']);
    expect(afterDelete.rules['nat/KUBE-SERVICES']).toEqual([
      clusterIP('ns1/svc1:p80', '172.30.0.41', 80, 'KUBE-SVC-XPGD46QRK7WJZT7O'),
      clusterIP('ns3/svc3:p80', '172.30.0.43', 80, 'KUBE-SVC-X27LE4BHSL4DOUIK'),
      nodePortsTail,
    ]);

    // Add svc4 without endpoints: only a REJECT rule.
    const svc4 = makeService('ns4', 'svc4', { clusterIP: '172.30.0.44', ports: tcp('p80', 80) });
    state.onService(null, svc4);
    const noEndpoints = await sync();
    expect(noEndpoints.chains.nat).toBeUndefined();
    expect(noEndpoints.chains.filter).toEqual(['KUBE-SERVICES']);
    expect(noEndpoints.rules['filter/KUBE-SERVICES']).toEqual(['-m comment --comment ns4/svc4:p80 has no endpoints -m tcp -p tcp -d 172.30.0.44 --dport 80 -j REJECT']);

    // Then its endpoints: its chains appear.
    state.onEndpointSlice(null, makeSlice('ns4', 'svc4', 'svc4-1', [ep('10.0.4.1')], tcp('p80', 80)));
    const withEndpoints = await sync();
    expect(withEndpoints.chains.nat).toEqual(['KUBE-SEP-AYCN5HPXMIRJNJXU', 'KUBE-SERVICES', 'KUBE-SVC-4SW47YFZTEDKD3PK']);
    expect(withEndpoints.chains.filter).toEqual(['KUBE-SERVICES']);
    expect(withEndpoints.rules['filter/KUBE-SERVICES']).toBeUndefined();

    // Change svc3's endpoint: its SVC chain and both SEP chains are written, the old SEP deleted.
    state.onEndpointSlice(eps3, makeSlice('ns3', 'svc3', 'svc3-1', [ep('10.0.3.2')], tcp('p80', 80)));
    const moved = await sync();
    expect(moved.chains.nat).toEqual(['KUBE-SEP-BSWRHOQ77KEXZLNL', 'KUBE-SEP-DKCFIS26GWF2WLWC', 'KUBE-SVC-X27LE4BHSL4DOUIK']);
    expect(moved.deleted.nat).toEqual(['KUBE-SEP-BSWRHOQ77KEXZLNL']);

    // The kernel now holds exactly the services that exist.
    expect(
      kernel
        .chains('nat')
        .filter((c) => c.startsWith('KUBE-S') && c !== 'KUBE-SERVICES')
        .sort(),
    ).toEqual(['KUBE-SEP-AYCN5HPXMIRJNJXU', 'KUBE-SEP-DKCFIS26GWF2WLWC', 'KUBE-SEP-SNQ3ZNILQDEJNDQO', 'KUBE-SVC-4SW47YFZTEDKD3PK', 'KUBE-SVC-X27LE4BHSL4DOUIK', 'KUBE-SVC-XPGD46QRK7WJZT7O'].sort());
  });
});
