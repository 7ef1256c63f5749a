import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * `--once` through the built CLI (--dry-run: the simulated kernel it prints is
 * what it programmed). With objects skipped as invalid the rest is programmed,
 * the summary says how many were skipped and each is listed with why, exit 0;
 * with a source that never synced nothing is programmed and the file and the
 * error are printed, exit 1; `--help` says both. That the host's kernel is not
 * touched then is proven at the kernel tier (test/kernel/start-fail-safe.test.ts).
 */
const ROOT = join(import.meta.dirname, '../..');
const CLI = join(ROOT, 'dist/server/cli.js');

const MANIFESTS = `apiVersion: v1
kind: Service
metadata: { name: web, namespace: ns }
spec: { clusterIP: 10.96.0.10, ports: [{ name: http, port: 80 }] }
---
apiVersion: v1
kind: Service
metadata: { name: bad-ip, namespace: ns }
spec: { clusterIP: 10.96.0.300, ports: [{ name: http, port: 80 }] }
---
apiVersion: v1
kind: Service
metadata: { name: bad-port, namespace: ns }
spec: { clusterIP: 10.96.0.11, ports: [{ name: http, port: 70000 }] }
---
apiVersion: v2
kind: Service
metadata: { name: other-version, namespace: ns }
spec: { clusterIP: 10.96.0.12, ports: [{ name: http, port: 80 }] }
`;

let dir: string;
let broken: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'kproxy-cli-once-'));
  writeFileSync(join(dir, 'services.yaml'), MANIFESTS);
  broken = mkdtempSync(join(tmpdir(), 'kproxy-cli-once-broken-'));
  writeFileSync(join(broken, 'good.yaml'), MANIFESTS.split('---')[0]);
  writeFileSync(join(broken, 'services.yaml'), 'apiVersion: v1\nkind: Service\nmetadata: { name: web\n');
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  rmSync(broken, { recursive: true, force: true });
});

function once(source: string) {
  return spawnSync(process.execPath, [CLI, '--once', '--dry-run', '--source', `file:${source}`, '--hostname-override', 'node-a'], { encoding: 'utf8', timeout: 60_000 });
}

describe.skipIf(!existsSync(CLI))('kproxy --once (needs npm run build)', () => {
  it('programs the rest, says how many were skipped and why, and exits 0', () => {
    const r = once(dir);
    expect(r.status, r.stderr).toBe(0);
    const lines = r.stdout.split('\n');
    const summary = lines.findIndex((l) => l.startsWith('kproxy: synced '));
    expect(lines[summary]).toMatch(/: 1 services \(1 ports\), 0 endpoints, \d+ rules \(.*\); 2 invalid objects skipped \(listed below\), 1 manifest document left out \(see the warnings\)$/);
    expect(lines.slice(summary + 1).filter(Boolean)).toEqual([
      'kproxy: skipped Service ns/bad-ip: spec.clusterIPs[0] "10.96.0.300": is not an IP address',
      'kproxy: skipped Service ns/bad-port: spec.ports[0].port 70000: must be a port from 1 to 65535',
    ]);
    // The simulated kernel printed before the summary: the valid Service is programmed, the skipped ones are not.
    const kernel = lines.slice(0, summary).join('\n');
    expect(kernel).toMatch(/^-A KUBE-SERVICES -m comment --comment "ns\/web:http has no endpoints" .* -d 10\.96\.0\.10 --dport 80 -j REJECT$/m);
    expect(kernel).not.toMatch(/bad-ip|bad-port|other-version|10\.96\.0\.1[12]\b/);
    // The document left out is named in the warnings.
    expect(r.stderr).toMatch(/manifest object skipped reason=".*services\.yaml:16: document 4: Service other-version with apiVersion \\"v2\\" \(want v1\)"/);
  }, 60_000);

  it('with a file that does not parse, programs nothing, names the file, line and error, and exits 1', () => {
    const r = once(broken);
    expect(r.status, r.stderr).toBe(1);
    // One line, and no simulated kernel before it: not even the good file's Service was programmed.
    const [line, ...rest] = r.stdout.split('\n');
    expect(rest).toEqual(['']);
    const start = `kproxy: nothing synced, the kernel was not touched: manifests from ${broken} could not be read completely: ${join(broken, 'services.yaml')}:4:1: invalid YAML: `;
    expect(line.startsWith(start), line).toBe(true);
    expect(line.slice(start.length)).toMatch(/^\S.* \[KPROXY_ERR_MANIFEST_PARSE\] \[KPROXY_ERR_SOURCE_NOT_SYNCED\]$/);
  }, 60_000);

  it('--help says so', () => {
    const r = spawnSync(process.execPath, [CLI, '--help'], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status).toBe(0);
    const help = r.stdout.replace(/\s+/g, ' ');
    expect(help).toMatch(/--once .*Exit 0 on success, also when objects were skipped: the rest is programmed, the summary counts the invalid objects .*each listed after it with why/);
    expect(help).toMatch(
      /--once .*exit 1 when the sync failed, or when a source could not be read completely or within --once-timeout \(the file and the error, or what never answered, are printed; nothing is touched\)/,
    );
    expect(help).toMatch(/--once-timeout DURATION how long --once waits for its source's first complete read .* \(default 2m0s\)/);
  }, 60_000);
});
