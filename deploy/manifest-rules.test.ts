import { readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { daemonSet, deployDir, examples, patched, shipped, type Obj } from './testing.ts';

/**
 * What the API schema cannot check (api-schema.ts checks fields and types):
 * the API server's own validation of names, ports and capabilities, and the
 * references between objects that only fail once pods start. Checked on the
 * shipped manifests, on the DaemonSet with each documented patch, and on the
 * example cluster.
 */

// apimachinery's validation (k8s.io/apimachinery/pkg/util/validation).
const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const QUALIFIED_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const ENV_VAR_NAME = /^[-._a-zA-Z][-._a-zA-Z0-9]*$/;

type Check = (value: string) => string | null;

const dns1123Label: Check = (v) => (v.length <= 63 && DNS1123_LABEL.test(v) ? null : 'must be a DNS-1123 label (lowercase alphanumerics and "-", at most 63)');
const dns1123Subdomain: Check = (v) => (v.length <= 253 && DNS1123_SUBDOMAIN.test(v) ? null : 'must be a DNS-1123 subdomain');
const dns1035Label: Check = (v) => (v.length <= 63 && DNS1035_LABEL.test(v) ? null : 'must be a DNS-1035 label (start with a letter)');
/** pathSegmentName: RBAC objects' names (ValidatePathSegmentName). */
const pathSegmentName: Check = (v) => (v !== '' && v !== '.' && v !== '..' && !/[/%]/.test(v) ? null : 'must be a path segment name');
/** ianaServiceName: a port name (IsValidPortName): at most 15, lowercase alphanumerics and "-", a letter, no "--", no "-" at either end. */
const ianaServiceName: Check = (v) =>
  v.length >= 1 && v.length <= 15 && /^[a-z0-9-]+$/.test(v) && /[a-z]/.test(v) && !v.includes('--') && !v.startsWith('-') && !v.endsWith('-') ? null : 'must be an IANA service name';
const labelKey: Check = (v) => {
  const [prefix, name] = v.includes('/') ? [v.slice(0, v.lastIndexOf('/')), v.slice(v.lastIndexOf('/') + 1)] : [null, v];
  if (prefix !== null && dns1123Subdomain(prefix)) return 'prefix must be a DNS-1123 subdomain';
  return name.length <= 63 && QUALIFIED_NAME.test(name) ? null : 'must be a qualified name';
};
const labelValue: Check = (v) => (v.length <= 63 && LABEL_VALUE.test(v) ? null : 'must be a label value');
const envVarName: Check = (v) => (ENV_VAR_NAME.test(v) ? null : 'must be a C identifier-like environment variable name');
const portNumber = (p: unknown) => (Number.isInteger(p) && (p as number) >= 1 && (p as number) <= 65535 ? null : 'must be within 1-65535');

/** CAPABILITIES: Linux's capability names without CAP_ (capabilities(7)), as container securityContext spells them. */
const CAPABILITIES = new Set(
  [
    'CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW',
    'IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD',
    'LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF CHECKPOINT_RESTORE',
  ]
    .join(' ')
    .split(' '),
);
const capability: Check = (v) => (CAPABILITIES.has(v) ? null : `is not a Linux capability name${v.startsWith('CAP_') ? ' (drop the CAP_ prefix)' : ''}`);

/** problems collects what is wrong with an object, one "path: value: why" per problem. */
class Problems {
  readonly list: string[] = [];
  check(path: string, value: string | undefined, ...checks: Check[]): void {
    if (value === undefined) return;
    for (const c of checks) {
      const why = c(value);
      if (why) this.list.push(`${path}: ${JSON.stringify(value)} ${why}`);
    }
  }
  add(path: string, why: string): void {
    this.list.push(`${path}: ${why}`);
  }
}

const NAME_RULE: Record<string, Check> = {
  ServiceAccount: dns1123Subdomain,
  ConfigMap: dns1123Subdomain,
  DaemonSet: dns1123Subdomain,
  ClusterRole: pathSegmentName,
  ClusterRoleBinding: pathSegmentName,
  Service: dns1035Label,
  EndpointSlice: dns1123Subdomain,
  Node: dns1123Subdomain,
  ServiceCIDR: dns1123Subdomain,
  Namespace: dns1123Label,
};

/** metadataProblems: the object's name by its kind's rule, its namespace, labels and annotation keys. */
function metadataProblems(o: Obj, p: Problems, path = 'metadata'): void {
  const rule = NAME_RULE[o.kind];
  if (o.kind && !rule) p.add(`${path}.name`, `no name rule known for kind ${o.kind} (add it to NAME_RULE)`);
  if (rule) p.check(`${path}.name`, o.metadata?.name, rule);
  p.check(`${path}.namespace`, o.metadata?.namespace, dns1123Label);
  labelProblems(o.metadata, p, path);
}

function labelProblems(meta: Obj | undefined, p: Problems, path: string): void {
  for (const [k, v] of Object.entries(meta?.labels ?? {})) {
    p.check(`${path}.labels`, k, labelKey);
    p.check(`${path}.labels.${k}`, String(v), labelValue);
  }
  for (const k of Object.keys(meta?.annotations ?? {})) p.check(`${path}.annotations`, k, labelKey);
}

/** podProblems: names, ports, probes, capabilities and references inside a pod template. */
function podProblems(spec: Obj, p: Problems, path: string): void {
  const volumes = new Set<string>();
  for (const [i, v] of (spec.volumes ?? []).entries()) {
    p.check(`${path}.volumes[${i}].name`, v.name, dns1123Label);
    if (volumes.has(v.name)) p.add(`${path}.volumes[${i}].name`, `${v.name} is declared twice`);
    volumes.add(v.name);
  }
  for (const [ci, c] of (spec.containers ?? []).entries()) {
    const cp = `${path}.containers[${ci}]`;
    p.check(`${cp}.name`, c.name, dns1123Label);
    const named = new Map<string, number>();
    for (const [pi, port] of (c.ports ?? []).entries()) {
      const pp = `${cp}.ports[${pi}]`;
      p.check(`${pp}.name`, port.name, ianaServiceName);
      const bad = portNumber(port.containerPort);
      if (bad) p.add(`${pp}.containerPort`, `${port.containerPort} ${bad}`);
      if (port.hostPort !== undefined && spec.hostNetwork && port.hostPort !== port.containerPort) p.add(`${pp}.hostPort`, 'must equal containerPort with hostNetwork');
      if (port.name) named.set(port.name, port.containerPort);
    }
    for (const probe of ['livenessProbe', 'readinessProbe', 'startupProbe'] as const) {
      const handler = c[probe]?.httpGet ?? c[probe]?.tcpSocket ?? c[probe]?.grpc;
      if (!handler) continue;
      const port = handler.port;
      if (typeof port === 'string') {
        if (!named.has(port)) p.add(`${cp}.${probe}`, `port ${port} names no port of the container (${[...named.keys()].join(', ') || 'none'})`);
      } else {
        const bad = portNumber(port);
        if (bad) p.add(`${cp}.${probe}`, `port ${port} ${bad}`);
        else if (![...named.values()].includes(port) && !spec.hostNetwork) p.add(`${cp}.${probe}`, `port ${port} is not a port of the container`);
      }
    }
    for (const [ei, e] of (c.env ?? []).entries()) p.check(`${cp}.env[${ei}].name`, e.name, envVarName);
    for (const [mi, m] of (c.volumeMounts ?? []).entries()) {
      if (!volumes.has(m.name)) p.add(`${cp}.volumeMounts[${mi}]`, `mounts volume ${m.name}, which the pod does not declare`);
    }
    const sc = c.securityContext ?? {};
    // The API server refuses this pair (ValidateSecurityContext): privileged implies escalation.
    if (sc.privileged === true && sc.allowPrivilegeEscalation === false) p.add(`${cp}.securityContext`, 'privileged: true contradicts allowPrivilegeEscalation: false');
    if (sc.capabilities?.add?.includes('SYS_ADMIN') && sc.allowPrivilegeEscalation === false) p.add(`${cp}.securityContext`, 'CAP_SYS_ADMIN contradicts allowPrivilegeEscalation: false');
    for (const [k, list] of Object.entries(sc.capabilities ?? {}) as [string, string[]][]) {
      for (const cap of list) p.check(`${cp}.securityContext.capabilities.${k}`, cap, ...(k === 'drop' && cap === 'ALL' ? [] : [capability]));
    }
  }
}

/** serviceProblems: a Service's and an EndpointSlice's port names and numbers (node ports in the default range). */
function serviceProblems(o: Obj, p: Problems): void {
  for (const [i, port] of (o.spec?.ports ?? o.ports ?? []).entries()) {
    const pp = `${o.kind === 'Service' ? 'spec.' : ''}ports[${i}]`;
    p.check(`${pp}.name`, port.name || undefined, ianaServiceName);
    if (port.port !== undefined) {
      const bad = portNumber(port.port);
      if (bad) p.add(`${pp}.port`, `${port.port} ${bad}`);
    }
    if (typeof port.targetPort === 'number' && portNumber(port.targetPort)) p.add(`${pp}.targetPort`, `${port.targetPort} must be within 1-65535`);
    if (typeof port.targetPort === 'string') p.check(`${pp}.targetPort`, port.targetPort, ianaServiceName);
    if (port.nodePort !== undefined && (port.nodePort < 30000 || port.nodePort > 32767)) p.add(`${pp}.nodePort`, `${port.nodePort} is outside the default node port range 30000-32767`);
  }
}

function problemsOf(o: Obj): string[] {
  const p = new Problems();
  metadataProblems(o, p);
  if (o.kind === 'DaemonSet') {
    labelProblems(o.spec.template.metadata, p, 'spec.template.metadata');
    podProblems(o.spec.template.spec, p, 'spec.template.spec');
  }
  if (o.kind === 'Service' || o.kind === 'EndpointSlice') serviceProblems(o, p);
  return p.list;
}

const patches = readdirSync(`${deployDir}patches`).filter((f) => f.endsWith('.yaml'));
const cases: [string, Obj][] = [
  ...shipped.map((m): [string, Obj] => [`${m.where} (${m.object.kind})`, m.object]),
  ...patches.map((f): [string, Obj] => [`the DaemonSet with patches/${f}`, patched(f)]),
  ...examples.map((m): [string, Obj] => [`${m.where} (${m.object.kind})`, m.object]),
];

describe('names, ports, probes and capabilities are what the API server and the kubelet accept', () => {
  it.each(cases)('%s', (_where, object) => {
    expect(problemsOf(object)).toEqual([]);
  });

  it('has a patch for every file under deploy/patches/', () => {
    expect(patches.sort()).toEqual(['dashboard-token.yaml', 'unprivileged.yaml']);
  });
});

describe('the shipped objects refer to each other by the names they have', () => {
  const names = (kind: string) => new Set(shipped.filter((m) => m.object.kind === kind).map((m) => (m.object.metadata as Obj).name as string));
  const pod = daemonSet.spec.template.spec;

  it('the pod mounts the shipped ConfigMap and runs as the shipped ServiceAccount, in the same namespace', () => {
    const configMaps = pod.volumes.filter((v: Obj) => v.configMap).map((v: Obj) => v.configMap.name);
    expect(configMaps.length).toBeGreaterThan(0);
    for (const name of configMaps) expect(names('ConfigMap')).toContain(name);
    expect(names('ServiceAccount')).toContain(pod.serviceAccountName);
    const namespaces = new Set(shipped.filter((m) => (m.object.metadata as Obj).namespace).map((m) => (m.object.metadata as Obj).namespace));
    expect([...namespaces]).toEqual(['kube-system']);
  });

  it('the binding names the shipped ClusterRole and ServiceAccount', () => {
    const binding = shipped.find((m) => m.object.kind === 'ClusterRoleBinding')!.object as Obj;
    expect(names('ClusterRole')).toContain(binding.roleRef.name);
    for (const s of binding.subjects) expect(names(s.kind)).toContain(s.name);
  });
});

describe('the rules themselves catch what they are for', () => {
  const ds = (mutate: (c: Obj, spec: Obj) => void): Obj => {
    const copy = structuredClone(daemonSet);
    mutate(copy.spec.template.spec.containers[0], copy.spec.template.spec);
    return copy;
  };

  it.each<[string, (c: Obj, spec: Obj) => void, RegExp]>([
    ['a capability spelt with CAP_', (c) => (c.securityContext = { capabilities: { add: ['CAP_NET_ADMIN'] } }), /"CAP_NET_ADMIN" is not a Linux capability name \(drop the CAP_ prefix\)/],
    ['an invented capability', (c) => (c.securityContext = { capabilities: { add: ['NET_FIREWALL'] } }), /"NET_FIREWALL" is not a Linux capability name/],
    ['privileged without escalation', (c) => (c.securityContext = { privileged: true, allowPrivilegeEscalation: false }), /privileged: true contradicts allowPrivilegeEscalation: false/],
    ['a probe on a port the container does not name', (c) => (c.livenessProbe.httpGet.port = 'health'), /livenessProbe: port health names no port of the container \(healthz\)/],
    ['a port name longer than 15', (c) => (c.ports[0].name = 'healthz-endpoint1'), /"healthz-endpoint1" must be an IANA service name/],
    ['a port out of range', (c) => (c.ports[0].containerPort = 70000), /containerPort: 70000 must be within 1-65535/],
    ['a mount of a volume not declared', (c) => (c.volumeMounts[0].name = 'conf'), /mounts volume conf, which the pod does not declare/],
    ['an upper-case container name', (c) => (c.name = 'KProxy'), /"KProxy" must be a DNS-1123 label/],
  ])('%s', (_what, mutate, expected) => {
    expect(problemsOf(ds(mutate)).join('\n')).toMatch(expected);
  });
});
