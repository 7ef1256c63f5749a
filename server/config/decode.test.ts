import { describe, expect, it } from 'vitest';
import { decodeKubeProxyConfiguration } from './decode.ts';
import { formatFieldError } from './field-error.ts';

const header = 'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n';

function problems(text: string): string[] {
  const r = decodeKubeProxyConfiguration(text);
  if (r.ok) throw new Error('expected the document to be rejected');
  return r.errors.map(formatFieldError);
}

describe('decodeKubeProxyConfiguration (strict, like kube-proxy)', () => {
  it('decodes a document, durations to milliseconds, absent fields left out', () => {
    const r = decodeKubeProxyConfiguration(`${header}mode: ipvs
ipvs: {scheduler: lc, syncPeriod: 1m30s, excludeCIDRs: [10.0.0.0/8]}
featureGates: {Foo: true, Bar: false}
oomScoreAdj: null
logging: {flushFrequency: 2000000000}
`);
    expect(r).toEqual({
      ok: true,
      document: {
        apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
        kind: 'KubeProxyConfiguration',
        mode: 'ipvs',
        ipvs: { scheduler: 'lc', syncPeriod: 90_000, excludeCIDRs: ['10.0.0.0/8'] },
        featureGates: { Foo: true, Bar: false },
        logging: { flushFrequency: 2000 },
      },
    });
  });

  it('reads YAML 1.1 like kube-proxy: yes/no/on/off are booleans, a date-like name stays text', () => {
    const r = decodeKubeProxyConfiguration(`${header}iptables: {masqueradeAll: yes, localhostNodePorts: off}\nipvs: {strictARP: on}\nhostnameOverride: 2024-01-02\n`);
    expect(r.ok && r.document).toMatchObject({
      iptables: { masqueradeAll: true, localhostNodePorts: false },
      ipvs: { strictARP: true },
      hostnameOverride: '2024-01-02',
    });
  });

  it('reads JSON too (YAML is a superset)', () => {
    const r = decodeKubeProxyConfiguration('{"apiVersion":"kubeproxy.config.k8s.io/v1alpha1","kind":"KubeProxyConfiguration","mode":"nftables"}');
    expect(r.ok && r.document.mode).toBe('nftables');
  });

  it('follows YAML anchors and aliases', () => {
    const r = decodeKubeProxyConfiguration(`${header}iptables: {syncPeriod: &p 10s}\nnftables: {syncPeriod: *p}\n`);
    expect(r.ok && r.document.nftables).toEqual({ syncPeriod: 10_000 });
  });

  it('rejects unknown fields, naming the full path and line', () => {
    expect(problems(`${header}modee: ipvs\niptables:\n  masqueradeBits: 14\nconntrack: {max: null}\n`)).toEqual([
      'unknown field "modee" (line 3)',
      'unknown field "iptables.masqueradeBits" (line 5)',
      'unknown field "conntrack.max" (line 6)',
    ]);
  });

  it('rejects duplicate fields, also nested and in featureGates', () => {
    expect(problems(`${header}mode: ipvs\nmode: iptables\niptables:\n  syncPeriod: 1s\n  syncPeriod: 2s\nfeatureGates: {A: true, A: false}\n`)).toEqual([
      'duplicate field "mode" (line 4)',
      'duplicate field "iptables.syncPeriod" (line 7)',
      'duplicate field "featureGates.A" (line 8)',
    ]);
  });

  it('rejects values of the wrong type, every one of them', () => {
    expect(
      problems(`${header}iptables:
  masqueradeBit: "14"
  masqueradeAll: maybe
  syncPeriod: 30
  minSyncPeriod: 30x
conntrack: {min: 99999999999, maxPerCore: 1.5}
nodePortAddresses: 10.0.0.0/8
hostnameOverride: 42
clientConnection: {qps: fast}
logging: {verbosity: -1}
featureGates: {A: maybe}
detectLocal: [a]
`),
    ).toEqual([
      'iptables.masqueradeBit: Invalid value: "14": must be a whole number (line 4)',
      'iptables.masqueradeAll: Invalid value: "maybe": must be true or false (line 5)',
      'iptables.syncPeriod: Invalid value: 30: must be a duration string such as "30s" or "1m30s" (line 6)',
      'iptables.minSyncPeriod: Invalid value: "30x": not a duration: unknown unit "x" (line 7)',
      'conntrack.min: Invalid value: 99999999999: out of range for a 32-bit integer (line 8)',
      'conntrack.maxPerCore: Invalid value: 1.5: must be a whole number (line 8)',
      'nodePortAddresses: Invalid value: "10.0.0.0/8": must be a list (line 9)',
      'hostnameOverride: Invalid value: 42: must be a string (line 10)',
      'clientConnection.qps: Invalid value: "fast": must be a number (line 11)',
      'logging.verbosity: Invalid value: -1: must be a whole number >= 0 (line 12)',
      'featureGates.A: Invalid value: "maybe": must be true or false (line 13)',
      'detectLocal: must be a mapping (line 14)',
    ]);
  });

  it('names list elements by index', () => {
    expect(problems(`${header}nodePortAddresses: [10.0.0.0/8, {a: 1}]\n`)).toEqual(['nodePortAddresses[1]: must be a string (line 3)']);
  });

  it('requires apiVersion and kind of KubeProxyConfiguration v1alpha1', () => {
    expect(problems('mode: ipvs\n')).toEqual(['apiVersion: Required value: must be "kubeproxy.config.k8s.io/v1alpha1" (line 1)', 'kind: Required value: must be "KubeProxyConfiguration" (line 1)']);
    expect(problems('apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeletConfiguration\n')).toEqual([
      'apiVersion: Unsupported value: "kubeproxy.config.k8s.io/v1alpha2": supported values: "kubeproxy.config.k8s.io/v1alpha1"',
      'kind: Unsupported value: "KubeletConfiguration": supported values: "KubeProxyConfiguration"',
    ]);
  });

  it('rejects empty files, several documents, non-mappings and YAML syntax errors', () => {
    expect(problems('')).toEqual(['the file is empty; expected a KubeProxyConfiguration']);
    expect(problems('# only a comment\n')).toEqual(['the file is empty; expected a KubeProxyConfiguration']);
    expect(problems(`${header}---\n${header}`)).toEqual(['expected one YAML document (a single KubeProxyConfiguration), found 2 (line 4)']);
    expect(problems('- a\n- b\n')).toEqual(['the document must be a YAML mapping (a KubeProxyConfiguration object) (line 1)']);
    const syntax = problems(`${header}iptables: [\n`);
    expect(syntax.length).toBeGreaterThan(0);
    expect(syntax[0]).toMatch(/^YAML syntax error: .* \(line \d+\)$/);
  });
});
