import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { FakeClock } from '../server/clock-fake.ts';
import { dashboardAttributes, type ResourceAttributes } from '../server/dashboard/auth/access-review.ts';
import { FakeAccessReviewer } from '../server/dashboard/auth/access-review-fake.ts';
import { DashboardAuth } from '../server/dashboard/auth/auth.ts';
import { checkDashboardBind } from '../server/dashboard/setup.ts';
import type { LoadedConfiguration } from '../server/config/load.ts';
import { InsecureBindError } from '../server/errors.ts';
import { validateObject } from './api-schema.ts';
import { argValue, daemonSet, deployDir, jsonPatch, patched, podStart, shippedConfigText, type Obj } from './testing.ts';

/**
 * The commands docs/deploy.md gives, run here as far as they can run without a
 * cluster: the objects it applies are valid, grant what kproxy asks, and the
 * patches and settings it describes give a DaemonSet that starts (kproxy's own
 * loader and its dashboard bind check) or fail the way the text says. The
 * snippets are read from the page itself, so the page and the test cannot drift.
 */
const page = readFileSync(join(deployDir, '..', 'docs', 'deploy.md'), 'utf8');

/** heredocs: the bodies of `<<'EOF'` here-documents in the page's shell blocks. */
function heredocs(): string[] {
  return [...page.matchAll(/<<'EOF'\n([\s\S]*?)\nEOF\n/g)].map((m) => m[1]);
}

/** section: the page's text from a heading to the next heading of the same level. */
function section(heading: string): string {
  const start = page.indexOf(`\n${heading}\n`);
  if (start < 0) throw new Error(`docs/deploy.md has no heading "${heading}"`);
  const level = /^#+/.exec(heading)![0];
  const next = page.slice(start + heading.length + 2).search(new RegExp(`\\n${level} `));
  return next < 0 ? page.slice(start) : page.slice(start, start + heading.length + 2 + next);
}

/** grants: whether a ClusterRole's rules allow a SubjectAccessReview's attributes, as RBAC matches them. */
function grants(role: Obj, a: ResourceAttributes): boolean {
  const resource = a.subresource ? `${a.resource}/${a.subresource}` : a.resource;
  return role.rules.some(
    (r: Obj) =>
      (r.apiGroups.includes(a.group) || r.apiGroups.includes('*')) &&
      (r.resources.includes(resource) || r.resources.includes('*')) &&
      (r.verbs.includes(a.verb) || r.verbs.includes('*')) &&
      (!r.resourceNames || r.resourceNames.includes(a.name)),
  );
}

/** placement is where setupDashboard (server/dashboard/setup.ts) puts the dashboard for a loaded configuration. */
function placement(loaded: LoadedConfiguration) {
  const { run, config } = loaded;
  const tls = run.dashboardTlsCertFile !== null;
  return run.dashboardBindAddress !== null
    ? { address: run.dashboardBindAddress, flag: '--dashboard-bind-address' as const, tls }
    : { address: config.metricsBindAddress, flag: '--metrics-bind-address' as const, tls };
}

/** inCluster: the auth a pod of the DaemonSet runs with, delegated auth (the Kubernetes source always has it). */
const inCluster = () => new DashboardAuth({ token: null, reviewer: new FakeAccessReviewer(), nodeName: 'node-a', clock: new FakeClock() });

describe('docs/deploy.md §6: the dashboard users it sets up may view, and only view', () => {
  const objects = heredocs().flatMap((text) => parseAllDocuments(text).map((d) => d.toJS() as Obj));

  it('applies valid objects', async () => {
    expect(objects.map((o) => `${o.kind}/${o.metadata.name}`)).toEqual(['ClusterRole/kproxy-dashboard-viewer', 'ClusterRoleBinding/kproxy-dashboard-viewer']);
    for (const o of objects) expect(await validateObject(o)).toEqual([]);
  });

  it("grants what kproxy's SubjectAccessReview asks to view, not to act, to the ServiceAccount the page creates and issues tokens for", () => {
    const [role, binding] = objects;
    expect(grants(role, dashboardAttributes('node-a', 'view'))).toBe(true);
    expect(grants(role, dashboardAttributes('node-a', 'act'))).toBe(false);
    // "verbs: [get, update] lets it act too"
    expect(section('## 6. Metrics, Prometheus and the dashboard')).toContain('(`verbs: [get, update]` lets it act too');
    expect(grants({ rules: [{ ...role.rules[0], verbs: ['get', 'update'] }] }, dashboardAttributes('node-a', 'act'))).toBe(true);
    expect(binding.roleRef.name).toBe(role.metadata.name);
    expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: 'kproxy-dashboard', namespace: 'kube-system' }]);
    expect(page).toContain('kubectl -n kube-system create serviceaccount kproxy-dashboard\n');
    expect(page).toContain('kubectl -n kube-system create token kproxy-dashboard --audience kproxy-dashboard');
  });
});

describe('docs/deploy.md §6: metrics for Prometheus, the dashboard on its own loopback listener', () => {
  const text = section('## 6. Metrics, Prometheus and the dashboard');
  const patchText = /patch daemonset kproxy --type=json \\\n\s+-p '(\[.*\])'/.exec(text)?.[1];
  const metricsBind = /set metricsBindAddress: (\S+) in deploy\/configmap\.yaml/.exec(text)?.[1];
  const configText = shippedConfigText.replace(/^(\s*)metricsBindAddress: .*$/m, `$1metricsBindAddress: ${metricsBind}`);

  it('gives a DaemonSet that starts: metrics on every address, the dashboard on loopback, delegated auth on', async () => {
    expect(patchText).toBeDefined();
    expect(metricsBind).toBe('0.0.0.0:10249');
    const ds = jsonPatch(daemonSet, JSON.parse(patchText!));
    expect(await validateObject(ds)).toEqual([]);
    const loaded = await podStart(ds, configText);
    expect(loaded.config.metricsBindAddress).toBe('0.0.0.0:10249');
    expect(placement(loaded)).toEqual({ address: '127.0.0.1:10263', flag: '--dashboard-bind-address', tls: false });
    expect(() => checkDashboardBind(placement(loaded), inCluster())).not.toThrow();
    expect(text).toContain('port-forward `10263:10263`');
  });

  it('is needed: the metrics listener opened without moving the dashboard stops kproxy (no TLS off loopback)', async () => {
    const loaded = await podStart(daemonSet, configText);
    expect(() => checkDashboardBind(placement(loaded), inCluster())).toThrow(InsecureBindError);
    expect(() => checkDashboardBind(placement(loaded), inCluster())).toThrow(/--metrics-bind-address 0\.0\.0\.0:10249 is reachable from the network and the dashboard there has no TLS/);
  });

  it('the static-token patch replaces the arguments: applied after it, the dashboard flag is gone (as the page warns)', async () => {
    const prometheus = jsonPatch(daemonSet, JSON.parse(patchText!));
    const after = patched('dashboard-token.yaml', prometheus);
    expect(argValue('--dashboard-bind-address', after.spec.template.spec.containers[0])).toBeUndefined();
    expect(text).toContain("The patch replaces the container's argument list, so apply it before the Prometheus\npatch above");
    // Applied first, then the Prometheus patch: both arguments are there.
    const ordered = jsonPatch(patched('dashboard-token.yaml'), JSON.parse(patchText!));
    const c = ordered.spec.template.spec.containers[0];
    expect(argValue('--dashboard-token-file', c)).toBe('/etc/kproxy/dashboard/token');
    expect(argValue('--dashboard-bind-address', c)).toBe('127.0.0.1:10263');
  });
});
