import { parse as parseYaml } from 'yaml';
import { describe, expect, it } from 'vitest';
import { SERVICE_ACCOUNT_TOKEN } from '../server/config/source-selection.ts';
import { ConfigFileError } from '../server/errors.ts';
import { parseManifests, validateObject, type Manifest } from './api-schema.ts';
import { argValue, daemonSet, examples, only, patched, podStart, shipped, shippedConfigText, type Obj } from './testing.ts';

const pod = daemonSet.spec.template.spec;
const container = pod.containers[0];

describe('every manifest under deploy/ and deploy/examples/ is valid against the Kubernetes API schema', () => {
  it('finds the shipped manifests and the examples', () => {
    const kinds = shipped.map((m) => m.object.kind).sort();
    expect(kinds).toEqual(['ClusterRole', 'ClusterRoleBinding', 'ConfigMap', 'DaemonSet', 'ServiceAccount']);
    const exampleKinds = new Set(examples.map((m) => m.object.kind));
    expect([...exampleKinds]).toEqual(expect.arrayContaining(['EndpointSlice', 'Node', 'Service']));
  });

  it.each([...shipped, ...examples].map((m): [string, Manifest] => [`${m.where} (${m.object.kind})`, m]))('%s', async (_where, manifest) => {
    expect(await validateObject(manifest.object)).toEqual([]);
  });
});

describe('the schema check is strict', () => {
  it('rejects a DaemonSet with a misspelt field, naming the field', async () => {
    const bad = structuredClone(daemonSet);
    bad.spec.template.spec.hostNetwrok = true;
    expect(await validateObject(bad)).toEqual([{ path: 'spec.template.spec.hostNetwrok', message: 'unknown field "hostNetwrok"' }]);
  });

  it('rejects an unknown field deep inside a container, in a list and a map', async () => {
    const bad = structuredClone(daemonSet);
    bad.spec.template.spec.containers[0].livenessProbe.httpGet.paht = '/livez';
    bad.spec.template.spec.volumes[1].hostPath.kind = 'File';
    expect((await validateObject(bad)).map((v) => v.path).sort()).toEqual(['spec.template.spec.containers[0].livenessProbe.httpGet.paht', 'spec.template.spec.volumes[1].hostPath.kind']);
  });

  it('rejects a Service whose type is not one the API defines', async () => {
    const [service] = examples.filter((m) => m.object.kind === 'Service').map((m) => structuredClone(m.object) as Obj);
    service.spec.type = 'Loadbalancer';
    const violations = await validateObject(service);
    expect(violations).toHaveLength(1);
    expect(violations[0].path).toBe('spec.type');
    expect(violations[0].message).toMatch(/allowed values.*"LoadBalancer"/);
  });

  it('rejects a value of the wrong JSON type and a missing required field', async () => {
    const bad = structuredClone(daemonSet);
    bad.spec.template.spec.containers[0].ports[0].containerPort = '10256';
    delete bad.spec.template.spec.containers[0].name;
    const violations = await validateObject(bad);
    expect([...violations].sort((a, b) => a.path.localeCompare(b.path))).toEqual([
      { path: 'spec.template.spec.containers[0]', message: 'must have required property name' },
      { path: 'spec.template.spec.containers[0].ports[0].containerPort', message: 'must be integer' },
    ]);
  });

  it('rejects kinds and API versions the API does not serve', async () => {
    expect(await validateObject({ ...daemonSet, kind: 'DaemonSett' })).toEqual([{ path: 'kind', message: 'no kind DaemonSett in apps/v1' }]);
    expect(await validateObject({ ...daemonSet, apiVersion: 'apps/v2' })).toEqual([{ path: 'apiVersion', message: 'no API group version apps/v2' }]);
  });

  it('reads YAML as kubectl does: `on` is a boolean (a label value must be a string), duplicate keys are errors', async () => {
    const [configMap] = parseManifests('apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels: { enabled: on }\n', 'inline');
    expect(await validateObject(configMap.object)).toEqual([{ path: 'metadata.labels.enabled', message: 'must be string' }]);
    expect(() => parseManifests('apiVersion: v1\nkind: ConfigMap\nkind: Secret\n', 'inline')).toThrow(/unique/);
  });
});

describe('deploy/ holds together as one rollout', () => {
  it('the DaemonSet selector matches its pod template labels (the API server rejects it otherwise)', () => {
    expect(daemonSet.spec.template.metadata.labels).toMatchObject(daemonSet.spec.selector.matchLabels);
  });

  it('the pods run as the ServiceAccount the ClusterRoleBinding binds to the ClusterRole', () => {
    const account = only('ServiceAccount', pod.serviceAccountName);
    const binding = only('ClusterRoleBinding');
    only('ClusterRole', binding.roleRef.name);
    expect(binding.roleRef).toMatchObject({ apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole' });
    expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: account.metadata.name, namespace: account.metadata.namespace }]);
    expect(account.metadata.namespace).toBe(daemonSet.metadata.namespace);
  });

  it('--config names config.conf of the ConfigMap mounted into the pod', () => {
    const volume = pod.volumes.find((v: Obj) => v.configMap);
    const configMap = only('ConfigMap', volume.configMap.name);
    expect(configMap.metadata.namespace).toBe(daemonSet.metadata.namespace);
    const mount = container.volumeMounts.find((m: Obj) => m.name === volume.name);
    expect(argValue('--config')).toBe(`${mount.mountPath}/config.conf`);
    expect(typeof configMap.data['config.conf']).toBe('string');
  });
});

describe('the DaemonSet runs kproxy where and as kube-proxy runs', () => {
  it('on every Linux node, whatever its taints, before ordinary pods, in the host network namespace', () => {
    expect(daemonSet.metadata.namespace).toBe('kube-system');
    expect(pod.nodeSelector).toEqual({ 'kubernetes.io/os': 'linux' });
    expect(pod.tolerations).toEqual([{ operator: 'Exists' }]);
    expect(pod.priorityClassName).toBe('system-node-critical');
    expect(pod.hostNetwork).toBe(true);
    // Cluster DNS sits behind a Service IP that the proxy itself programs.
    expect(pod.dnsPolicy).toBe('Default');
  });

  it('rolls out a bounded share of nodes at a time and never two proxies on one node', () => {
    expect(daemonSet.spec.updateStrategy.type).toBe('RollingUpdate');
    expect(daemonSet.spec.updateStrategy.rollingUpdate.maxSurge).toBe(0);
    expect(['10%', 1]).toContain(daemonSet.spec.updateStrategy.rollingUpdate.maxUnavailable);
  });

  it('knows its node by name and reaches the API server without a Service IP', () => {
    const env = Object.fromEntries(container.env.map((e: Obj) => [e.name, e]));
    expect(argValue('--hostname-override')).toBe('$(NODE_NAME)');
    expect(env.NODE_NAME.valueFrom).toEqual({ fieldRef: { fieldPath: 'spec.nodeName' } });
    expect(env.KUBERNETES_SERVICE_HOST.value).toEqual(expect.any(String));
    expect(env.KUBERNETES_SERVICE_PORT.value).toMatch(/^\d+$/);
  });

  it('is probed on :10256 — liveness on /livez, readiness and start-up on /readyz (has synced)', () => {
    const healthz = container.ports.find((p: Obj) => p.name === 'healthz');
    expect(healthz).toEqual({ name: 'healthz', containerPort: 10256, protocol: 'TCP' });
    expect(container.livenessProbe.httpGet).toEqual({ path: '/livez', port: 'healthz' });
    expect(container.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'healthz' });
    expect(container.startupProbe.httpGet).toEqual({ path: '/readyz', port: 'healthz' });
    expect(container.resources.requests).toEqual({ cpu: expect.any(String), memory: expect.any(String) });
  });

  it('requests at least the memory an idle kproxy holds, and limits it above its peak at 10,000 x 10', () => {
    const mib = (q: string) => {
      const m = /^(\d+)(Mi|Gi)$/.exec(q);
      if (!m) throw new Error(`unexpected memory quantity ${q}`);
      return Number(m[1]) * (m[2] === 'Gi' ? 1024 : 1);
    };
    // Measured by test/bench/memory-sizing.ts (docs/deploy.md, "Memory"): RSS 154 MiB idle with
    // no Service, peak 570 MiB through the first sync at 10,000 Services x 10 endpoints.
    expect(mib(container.resources.requests.memory)).toBeGreaterThanOrEqual(154);
    expect(mib(container.resources.limits.memory)).toBeGreaterThan(570);
    expect(container.resources.limits.cpu).toBeUndefined();
  });

  it('gives a large first sync time before liveness, and counts a node available only after it stayed ready', () => {
    // A 30,000 x 10 first sync took 80-110 s on a 2-core machine (issue 16): the
    // startup budget must cover several times that, lists included.
    const startup = container.startupProbe;
    expect(startup.periodSeconds * startup.failureThreshold).toBeGreaterThanOrEqual(5 * 110);
    expect(startup.timeoutSeconds).toBeGreaterThanOrEqual(5);
    expect(daemonSet.spec.minReadySeconds).toBeGreaterThanOrEqual(10);
    expect(daemonSet.spec.updateStrategy.rollingUpdate.maxUnavailable).not.toBe('100%');
  });

  it("shares the host's xtables lock and reads its kernel modules", () => {
    const hostPaths = Object.fromEntries(pod.volumes.filter((v: Obj) => v.hostPath).map((v: Obj) => [v.hostPath.path, v]));
    expect(hostPaths['/run/xtables.lock'].hostPath.type).toBe('FileOrCreate');
    expect(hostPaths['/lib/modules']).toBeDefined();
    const mounts = Object.fromEntries(container.volumeMounts.map((m: Obj) => [m.mountPath, m]));
    expect(mounts['/run/xtables.lock'].name).toBe(hostPaths['/run/xtables.lock'].name);
    expect(mounts['/run/xtables.lock'].readOnly).not.toBe(true);
    expect(mounts['/lib/modules']).toMatchObject({ name: hostPaths['/lib/modules'].name, readOnly: true });
    expect(container.securityContext).toEqual({ privileged: true });
  });
});

describe('the ClusterRole is plain RBAC', () => {
  // What it grants is compared with what kproxy asks the API server in test/api/rbac.test.ts.
  it('grants each (group, resource, verb) once, by resource type only (no names, no URLs)', () => {
    const role = only('ClusterRole');
    const granted = role.rules.flatMap((r: Obj) => r.apiGroups.flatMap((g: string) => r.resources.flatMap((res: string) => r.verbs.map((v: string) => `${g} ${res} ${v}`))));
    expect(new Set(granted).size).toBe(granted.length);
    expect(role.rules.some((r: Obj) => r.resourceNames || r.nonResourceURLs)).toBe(false);
    expect(granted.some((g: string) => g.includes('*'))).toBe(false);
  });
});

describe('config.conf is a KubeProxyConfiguration matching the DaemonSet', () => {
  const configText = shippedConfigText;
  const config = parseYaml(configText, { version: '1.1', uniqueKeys: true }) as Obj;

  it('is kube-proxy v1alpha1 in iptables mode with a cluster CIDR', () => {
    expect(config.apiVersion).toBe('kubeproxy.config.k8s.io/v1alpha1');
    expect(config.kind).toBe('KubeProxyConfiguration');
    expect(config.mode).toBe('iptables');
    expect(config.clusterCIDR).toMatch(/^\d+\.\d+\.\d+\.\d+\/\d+$/);
  });

  it('serves /healthz on the port the probes use, on all addresses (the kubelet probes the node IP)', () => {
    expect(config.healthzBindAddress).toBe(`0.0.0.0:${container.ports.find((p: Obj) => p.name === 'healthz').containerPort}`);
  });

  it("loads through kproxy's own loader as the pod would: in-cluster API, this node's name, no ignored settings", async () => {
    const loaded = await podStart(daemonSet, configText);
    expect(loaded.run).toMatchObject({ source: null, kubeconfig: null, dashboardTokenFile: null });
    expect(loaded.nodeName).toBe('node-a');
    expect(loaded.config).toMatchObject({
      mode: 'iptables',
      clusterCIDRs: ['10.244.0.0/16'],
      healthzBindAddress: '0.0.0.0:10256',
      metricsBindAddress: '127.0.0.1:10249',
      nodePortAddresses: ['primary'],
      oomScoreAdj: -999,
      // A taken :10256 (kube-proxy still on the node) stops kproxy instead of letting two proxies run.
      bindAddressHardFail: true,
    });
    expect(loaded.config.iptables).toMatchObject({ syncPeriodMs: 30_000, minSyncPeriodMs: 1_000 });
    expect(loaded.warnings).toEqual([]);
  });

  it('loads with the dashboard-token patch, whose --dashboard-token-file must exist', async () => {
    const ds = patched('dashboard-token.yaml');
    const tokenFile = argValue('--dashboard-token-file', ds.spec.template.spec.containers[0])!;
    expect((await podStart(ds, configText, [tokenFile])).run.dashboardTokenFile).toBe(tokenFile);
    await expect(podStart(ds, configText)).rejects.toThrow(/dashboard-token-file/);
  });

  it('refuses to start in a pod without its service account token, instead of serving the example cluster', async () => {
    // automountServiceAccountToken: false, set by a policy engine or by hand.
    const err = await podStart(daemonSet, configText, [], { token: false }).then(
      () => null,
      (e: unknown) => e as { code: string; message: string },
    );
    expect(err?.code).toBe('KPROXY_ERR_NO_SOURCE');
    expect(err?.message).toContain(`the service account token ${SERVICE_ACCOUNT_TOKEN} is missing`);
  });

  it('would catch a misspelt field in config.conf (the loader decodes strictly)', async () => {
    await expect(podStart(daemonSet, configText.replace('\nmode:', '\nmdoe:'))).rejects.toThrow(ConfigFileError);
  });

  it('keeps metrics and the dashboard on loopback: off loopback the dashboard would need TLS, which the DaemonSet does not give it', () => {
    expect(argValue('--dashboard-tls-cert-file')).toBeUndefined();
    expect(argValue('--dashboard-bind-address')).toBeUndefined();
    expect(config.metricsBindAddress).toBe('127.0.0.1:10249');
  });
});

describe('the documented DaemonSet patches (deploy/patches/) give valid DaemonSets', () => {
  it('dashboard-token.yaml mounts the token Secret and passes --dashboard-token-file, keeping the other arguments', async () => {
    const ds = patched('dashboard-token.yaml');
    expect(await validateObject(ds)).toEqual([]);
    const c = ds.spec.template.spec.containers[0];
    const tokenFile = argValue('--dashboard-token-file', c);
    const mount = c.volumeMounts.find((m: Obj) => tokenFile?.startsWith(`${m.mountPath}/`));
    const volume = ds.spec.template.spec.volumes.find((v: Obj) => v.name === mount?.name);
    expect(volume.secret).toEqual({ secretName: 'kproxy-dashboard-token', defaultMode: 0o400 });
    expect(c.args.slice(0, container.args.length)).toEqual(container.args);
    expect(c.volumeMounts).toHaveLength(container.volumeMounts.length + 1);
  });

  it('unprivileged.yaml replaces privileged with NET_ADMIN, NET_RAW and SYS_RESOURCE', async () => {
    const ds = patched('unprivileged.yaml');
    expect(await validateObject(ds)).toEqual([]);
    const { securityContext } = ds.spec.template.spec.containers[0];
    expect(securityContext.privileged).toBe(false);
    expect(securityContext.capabilities).toEqual({ drop: ['ALL'], add: ['NET_ADMIN', 'NET_RAW', 'SYS_RESOURCE'] });
  });
});
