import { describe, expect, it } from 'vitest';
import type { TraceResult } from './dashboard/protocol.ts';
import { runTrace, splitTraceArgs } from './trace-command.ts';

/** DAEMON_MS: a --dry-run trace assembles and syncs a daemon (a second on a quiet machine; several on a loaded, shared one). */
const DAEMON_MS = 30_000;

/** run calls `kproxy trace ARGS` in-process and collects what it prints. */
async function run(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runTrace(args, { out: (t) => (out += t), err: (t) => (err += t) });
  return { code, out, err };
}

describe('kproxy trace', () => {
  it('takes its own flags (both spellings) and leaves kproxy flags to the configuration', () => {
    expect(splitTraceArgs(['--proto', 'tcp', '--src=10.0.0.2', '--dst', '10.96.0.10:80', '--json', '--proxy-mode', 'nftables', '--dry-run'])).toEqual({
      raw: { proto: 'tcp', src: '10.0.0.2', dst: '10.96.0.10:80' },
      json: true,
      help: false,
      rest: ['--proxy-mode', 'nftables', '--dry-run'],
    });
  });

  it('exits 1 on bad input, naming the field, before reading anything', async () => {
    const r = await run('--proto', 'tcp', '--src', '10.0.0.2', '--dst', '10.96.10.10');
    expect(r.code).toBe(1);
    expect(r.out).toBe('');
    expect(r.err).toBe('kproxy trace: dst: "10.96.10.10" has no port (write IP:PORT, [IPv6]:PORT) [KPROXY_ERR_TRACE_INPUT]\n');
    expect((await run('--src', '10.0.0.2', '--dst', '10.96.10.10:80')).err).toMatch(/^kproxy trace: proto: missing/);
    expect((await run('--proto', 'tcp', '--src')).err).toBe('kproxy trace: src: --src needs a value [KPROXY_ERR_TRACE_INPUT]\n');
    const flag = await run('--proto', 'tcp', '--src', '10.0.0.2', '--dst', '10.96.10.10:80', '--proxy-mode', 'carrier-pigeon');
    expect(flag.code).toBe(1);
    expect(flag.err).toMatch(/mode/);
  });

  it('prints its usage with --help', async () => {
    const r = await run('--help');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^Usage: kproxy trace --proto tcp\|udp\|sctp --src IP\[:PORT\] --dst IP:PORT/);
  });

  it.each(['iptables', 'nftables', 'ipvs'])(
    'traces through --dry-run simulated kernel in %s mode, as JSON, with drift checked',
    async (mode) => {
      const r = await run('--proto', 'tcp', '--src', '203.0.113.7', '--dst', '192.0.2.10:443', '--dry-run', '--proxy-mode', mode, '--json');
      expect(r.err).toBe('');
      expect(r.code).toBe(0);
      const t = JSON.parse(r.out) as TraceResult;
      expect(t).toMatchObject({ mode, verdict: 'dnat', service: 'shop/web:https', simulated: true, drift: [] });
      // The kernel modes DNAT to the Service's two endpoints; userspace mode to kproxy's proxy socket, which relays.
      expect(t.endpoints).toHaveLength(mode === 'userspace' ? 1 : 2);
      expect(Object.keys(t).sort()).toEqual(['drift', 'endpoints', 'family', 'masquerade', 'mode', 'notes', 'path', 'query', 'readAt', 'reason', 'service', 'simulated', 'verdict']);
    },
    DAEMON_MS,
  );

  it(
    'prints the verdict, the reason, the path and the endpoints as text',
    async () => {
      const r = await run('--proto', 'tcp', '--src', '10.0.0.2', '--dst', '10.96.10.10:80', '--dry-run');
      expect(r.code).toBe(0);
      const lines = r.out.split('\n');
      expect(lines[0]).toMatch(/^kproxy trace: tcp 10\.0\.0\.2 → 10\.96\.10\.10:80 from external \(iptables mode, IPv4; read: iptables \(/);
      expect(lines[1]).toBe('verdict: DNAT');
      expect(lines[2]).toMatch(/^reason: shop\/frontend:http: a new connection to cluster IP 10\.96\.10\.10:80\/tcp is DNATed/);
      expect(lines).toContain('path:');
      expect(r.out).toMatch(/\nendpoints \(\d+\):\n/);
      expect(r.out).toMatch(/\ndrift: none on this path\n$/);
    },
    DAEMON_MS,
  );
});
