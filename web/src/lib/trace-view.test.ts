import { describe, expect, it } from 'vitest';
import type { TraceStep } from './protocol.ts';
import { byHook, formForFlow, percent, stepHref, stepTone, traceSearch } from './trace-view.ts';

const step = (over: Partial<TraceStep>): TraceStep => ({ table: 'nat', chain: 'KUBE-SERVICES', hook: 'prerouting', rule: '-j X', index: 0, packets: 0, bytes: 0, verdict: 'jump X', ...over });

describe('trace view', () => {
  it("pre-fills the form from a Service page's flows; a node port takes the node's first address", () => {
    expect(formForFlow({ kind: 'clusterIP', address: '10.96.10.30:443/TCP' }, ['10.0.0.10'])).toEqual({ proto: 'tcp', src: '', dst: '10.96.10.30:443', from: '' });
    expect(formForFlow({ kind: 'clusterIP', address: '[fd00:10:96::30]:53/UDP' }, [])).toEqual({ proto: 'udp', src: '', dst: '[fd00:10:96::30]:53', from: '' });
    expect(formForFlow({ kind: 'nodePort', address: 'node:30443/TCP' }, ['10.0.0.10', 'fd00::10']).dst).toBe('10.0.0.10:30443');
    expect(formForFlow({ kind: 'nodePort', address: 'node:30443/TCP' }, ['fd00::10']).dst).toBe('[fd00::10]:30443');
    // No Node address known: the port is kept for the operator to complete.
    expect(formForFlow({ kind: 'nodePort', address: 'node:30443/TCP' }, []).dst).toBe(':30443');
  });

  it('links each step to its rule on the Rules page, or to its chain for a chain end', () => {
    expect(stepHref(step({ table: 'ip6-kube-proxy', chain: 'service-X-ns/svc/tcp/p', index: 2 }))).toBe('#/rules/ip6-kube-proxy/service-X-ns%2Fsvc%2Ftcp%2Fp?rule=2');
    expect(stepHref(step({ chain: 'PREROUTING', rule: null, index: null, verdict: 'policy ACCEPT' }))).toBe('#/rules/nat/PREROUTING');
  });

  it('cuts a path into runs of one hook, and colours steps by what they do', () => {
    const groups = byHook([step({ hook: 'prerouting' }), step({ hook: 'prerouting' }), step({ hook: 'forward' }), step({ hook: 'postrouting' })]);
    expect(groups.map((g) => [g.hook, g.steps.length])).toEqual([
      ['prerouting', 2],
      ['forward', 1],
      ['postrouting', 1],
    ]);
    expect(stepTone(step({ verdict: 'REJECT (icmp-port-unreachable)' }))).toBe('bad');
    expect(stepTone(step({ verdict: 'dnat to 10.244.0.11:8080' }))).toBe('ok');
    expect(stepTone(step({ verdict: 'goto service-X' }))).toBe('info');
    expect(stepTone(step({ verdict: 'MARK 0x4000' }))).toBe('');
  });

  it('asks the API with the filled fields only, and writes chances for people', () => {
    expect(traceSearch({ proto: 'tcp', src: ' 10.0.0.2 ', dst: '10.96.0.10:80', from: '' })).toBe('proto=tcp&src=10.0.0.2&dst=10.96.0.10%3A80');
    expect(percent(1 / 3)).toBe('33.3%');
    expect(percent(1)).toBe('100%');
  });
});
