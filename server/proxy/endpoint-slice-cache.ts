import { EndpointSliceInvalidError } from '../errors.ts';
import { endpointKey, type Endpoint } from './endpoint.ts';
import { endpointIPProblem, objectIP, type IPFamily } from '../net/ip.ts';
import { LABEL_SERVICE_NAME, objectRef, type EndpointSlice } from './kube-objects.ts';
import { flatString } from './flat-string.ts';
import { PROTOCOLS, servicePortId, type Protocol } from './service-port.ts';

/** The API server caps a slice at 1000 endpoints and an endpoint at 100 addresses. */
const MAX_ENDPOINTS_PER_SLICE = 1000;
const MAX_PORTS_PER_SLICE = 100;
const MAX_ADDRESSES = 100;
/** MAX_NAME_LABEL: a DNS label's length limit, which a Service name obeys. */
const MAX_NAME_LABEL = 63;

interface SlicePort {
  name: string;
  port: number;
  protocol: Protocol;
}

interface SliceEndpointInfo {
  ip: string;
  nodeName: string;
  zone: string;
  ready: boolean;
  serving: boolean;
  terminating: boolean;
  zoneHints: readonly string[];
  nodeHints: readonly string[];
}

/** SliceInfo is the part of an EndpointSlice kproxy keeps (small on purpose: a node caches every slice). */
export interface SliceInfo {
  readonly ports: readonly SlicePort[];
  readonly endpoints: readonly SliceEndpointInfo[];
}

export type SliceConversion = { kind: 'slice'; service: string; sliceName: string; info: SliceInfo } | { kind: 'ignored'; reason: string };

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/**
 * sliceInfoFromEndpointSlice validates an EndpointSlice and keeps what the proxy
 * needs. It throws EndpointSliceInvalidError naming the slice and the bad field.
 *
 * It refuses what the API server refuses (discovery's validateEndpoints: the
 * addresses through ValidateEndpointIP; the service-name label as a name)
 * here, in the tracker every source feeds, not in the file source: manifests
 * have no API server in front of them, and through the Kubernetes source the
 * same rule is a defence kube-proxy's inputs never trip, so a source added
 * later cannot forget it.
 */
export function sliceInfoFromEndpointSlice(slice: EndpointSlice, family: IPFamily): SliceConversion {
  const ref = objectRef('EndpointSlice', slice);
  const bad = (field: string, value: unknown, why: string): never => {
    let shown = JSON.stringify(value);
    if (shown !== undefined && shown.length > 80) shown = shown.slice(0, 77) + '...';
    throw new EndpointSliceInvalidError(`${ref}: ${field} ${shown ?? 'is missing'}: ${why}`);
  };
  const meta = slice?.metadata;
  if (typeof meta?.name !== 'string' || meta.name === '' || meta.name.length > 253) bad('metadata.name', meta?.name, 'must be a name');
  if (typeof meta?.namespace !== 'string' || !DNS_LABEL.test(meta.namespace)) bad('metadata.namespace', meta?.namespace, 'must be a DNS label');
  const serviceName = meta!.labels?.[LABEL_SERVICE_NAME];
  if (typeof serviceName !== 'string' || serviceName === '') bad(`metadata.labels["${LABEL_SERVICE_NAME}"]`, serviceName, 'must name the service the slice belongs to');
  // The label is half of the service key ("ns/name"): a value holding a "/"
  // ("web/evil" in namespace shop) would key the slice to shop/web. Service
  // names are DNS-1035 labels, or DNS-1123 labels under Kubernetes'
  // RelaxedServiceNameValidation (KEP-5311, on by default from 1.36): the
  // wider of the two is checked, so no slice of a Service the API server
  // accepts is refused, and no value can name another Service's key.
  if (serviceName!.length > MAX_NAME_LABEL || !DNS_LABEL.test(serviceName!))
    bad(`metadata.labels["${LABEL_SERVICE_NAME}"]`, serviceName, 'must be a Service name: a DNS label of at most 63 lower-case letters, digits and "-"');
  if (meta!.labels?.['service.kubernetes.io/service-proxy-name'] !== undefined) return { kind: 'ignored', reason: 'it names another service proxy' };
  const addressType = slice.addressType;
  if (addressType === 'FQDN') return { kind: 'ignored', reason: 'FQDN slices are not proxied' };
  if (addressType !== 'IPv4' && addressType !== 'IPv6') bad('addressType', addressType, 'must be IPv4, IPv6 or FQDN');
  if (addressType !== family) return { kind: 'ignored', reason: `it holds ${addressType} addresses` };

  const rawPorts = slice.ports ?? [];
  if (!Array.isArray(rawPorts)) bad('ports', rawPorts, 'must be a list');
  if (rawPorts.length > MAX_PORTS_PER_SLICE) bad('ports', `${rawPorts.length} ports`, `at most ${MAX_PORTS_PER_SLICE} are accepted`);
  const ports: SlicePort[] = [];
  for (const [i, p] of rawPorts.entries()) {
    if (p == null || typeof p !== 'object') bad(`ports[${i}]`, p, 'must be an object');
    const name = p.name ?? '';
    if (typeof name !== 'string' || (name !== '' && !DNS_LABEL.test(name))) bad(`ports[${i}].name`, name, 'must be a DNS label');
    const protocol = p.protocol ?? 'TCP';
    if (!PROTOCOLS.includes(protocol as Protocol)) bad(`ports[${i}].protocol`, protocol, 'must be TCP, UDP or SCTP');
    // A port without a number means "all ports" in the API; kube-proxy cannot proxy that and skips it.
    if (p.port === null || p.port === undefined) continue;
    if (typeof p.port !== 'number' || !Number.isInteger(p.port) || p.port < 1 || p.port > 65535) bad(`ports[${i}].port`, p.port, 'must be a port from 1 to 65535');
    if (ports.some((q) => q.name === name && q.protocol === protocol)) bad(`ports[${i}].name`, name, 'is used by another port of this slice');
    ports.push({ name, port: p.port, protocol: protocol as Protocol });
  }
  ports.sort((a, b) => a.port - b.port);

  const rawEndpoints = slice.endpoints ?? [];
  if (!Array.isArray(rawEndpoints)) bad('endpoints', rawEndpoints, 'must be a list');
  if (rawEndpoints.length > MAX_ENDPOINTS_PER_SLICE) bad('endpoints', `${rawEndpoints.length} endpoints`, `at most ${MAX_ENDPOINTS_PER_SLICE} are accepted`);
  const endpoints: SliceEndpointInfo[] = [];
  for (const [i, ep] of rawEndpoints.entries()) {
    const at = `endpoints[${i}]`;
    if (ep == null || typeof ep !== 'object') bad(at, ep, 'must be an object');
    const addrs = ep.addresses;
    if (!Array.isArray(addrs) || addrs.length === 0 || addrs.length > MAX_ADDRESSES) bad(`${at}.addresses`, addrs, `must list 1 to ${MAX_ADDRESSES} addresses`);
    // Only the first address is used, as in kube-proxy; the others must still be valid.
    const ips = addrs!.map((a, j) => {
      const parsed = objectIP(a);
      if (parsed.ip === null) return bad(`${at}.addresses[${j}]`, a, parsed.why);
      if (parsed.family !== family) bad(`${at}.addresses[${j}]`, a, `is an ${parsed.family} address in a slice of addressType ${family}`);
      const special = endpointIPProblem(parsed.ip);
      if (special !== null) bad(`${at}.addresses[${j}]`, a, special);
      return parsed.ip;
    });
    const c = ep.conditions ?? {};
    for (const k of ['ready', 'serving', 'terminating'] as const) {
      if (c[k] !== undefined && c[k] !== null && typeof c[k] !== 'boolean') bad(`${at}.conditions.${k}`, c[k], 'must be true or false');
    }
    for (const k of ['nodeName', 'zone'] as const) {
      if (ep[k] !== undefined && ep[k] !== null && (typeof ep[k] !== 'string' || ep[k]!.length > 253)) bad(`${at}.${k}`, ep[k], 'must be a name');
    }
    endpoints.push({
      ip: ips[0],
      nodeName: ep.nodeName ?? '',
      zone: ep.zone ?? '',
      // Unset conditions mean ready/serving and not terminating (API semantics).
      ready: c.ready == null || c.ready === true,
      serving: c.serving == null || c.serving === true,
      terminating: c.terminating === true,
      zoneHints: hintNames(ep.hints?.forZones),
      nodeHints: hintNames(ep.hints?.forNodes),
    });
  }
  return { kind: 'slice', service: `${meta!.namespace}/${serviceName}`, sliceName: meta!.name!, info: { ports, endpoints } };
}

/** NO_HINTS is shared by every endpoint without hints (nearly all): two arrays per endpoint are 3 MB per 100,000. */
const NO_HINTS: readonly string[] = Object.freeze([]);

function hintNames(list: { name?: string }[] | undefined): readonly string[] {
  if (!Array.isArray(list) || list.length === 0) return NO_HINTS;
  const names = list.map((h) => h?.name).filter((n): n is string => typeof n === 'string' && n !== '');
  return names.length === 0 ? NO_HINTS : [...new Set(names)].sort();
}

/**
 * StoredSlice is a slice as the cache holds it: for each of its ports, its
 * endpoints as the Endpoint objects endpointsOf hands out. An endpoint of a
 * service port is one object, made once when its slice arrives and shared by
 * the cache and the endpoints map the proxiers read (not a slice's endpoint
 * plus a copy per merge).
 */
interface StoredSlice {
  readonly ports: readonly SlicePort[];
  /** endpoints[i]: the endpoints of ports[i]. */
  readonly endpoints: readonly (readonly Endpoint[])[];
}

/** sameSlice compares two stored slices (an unchanged slice re-sent by a relist is not a change). */
function sameSlice(a: StoredSlice | undefined, b: StoredSlice): boolean {
  return a !== undefined && JSON.stringify(a) === JSON.stringify(b);
}

/**
 * EndpointSliceCache holds every EndpointSlice of every service, grouped by
 * service, and merges a service's slices into endpoints per service port.
 * Endpoints can move between slices, so slices are kept by name rather than
 * merged eagerly.
 */
export class EndpointSliceCache {
  readonly #slices = new Map<string, Map<string, StoredSlice>>();
  readonly #nodeName: string;

  constructor(nodeName: string) {
    this.#nodeName = nodeName;
  }

  /** set stores a slice; returns false when it is identical to the stored one. */
  set(service: string, sliceName: string, info: SliceInfo): boolean {
    let bySlice = this.#slices.get(service);
    if (!bySlice) this.#slices.set(service, (bySlice = new Map()));
    const stored = this.#store(info);
    if (sameSlice(bySlice.get(sliceName), stored)) return false;
    bySlice.set(sliceName, stored);
    return true;
  }

  /** #store makes a slice's Endpoint objects, one per endpoint and port, as endpointsOf will hand them out. */
  #store(info: SliceInfo): StoredSlice {
    return {
      ports: info.ports,
      endpoints: info.ports.map((port) =>
        info.endpoints.map((e) => ({
          ip: e.ip,
          port: port.port,
          // A flat string: the key is held as long as the endpoint (see flatString).
          key: flatString(endpointKey(e.ip, port.port)),
          isLocal: this.#nodeName !== '' && e.nodeName === this.#nodeName,
          ready: e.ready,
          serving: e.serving,
          terminating: e.terminating,
          nodeName: e.nodeName,
          zone: e.zone,
          zoneHints: e.zoneHints,
          nodeHints: e.nodeHints,
        })),
      ),
    };
  }

  /** delete removes a slice; returns false when it was not stored. */
  delete(service: string, sliceName: string): boolean {
    const bySlice = this.#slices.get(service);
    if (!bySlice?.delete(sliceName)) return false;
    if (bySlice.size === 0) this.#slices.delete(service);
    return true;
  }

  /**
   * endpointsOf merges the slices of one service ("ns/name") into endpoints per
   * service port id ("ns/name:port/PROTO"), deduplicated by ip:port (a local
   * copy wins) and sorted by ip:port text, as kube-proxy orders them.
   */
  endpointsOf(service: string): Map<string, Endpoint[]> {
    const out = new Map<string, Endpoint[]>();
    const bySlice = this.#slices.get(service);
    if (!bySlice) return out;
    const [namespace, name] = service.split('/');
    const sets = new Map<string, Map<string, Endpoint>>();
    for (const slice of bySlice.values()) {
      for (const [i, port] of slice.ports.entries()) {
        const id = servicePortId(namespace, name, port.name, port.protocol);
        let set = sets.get(id);
        if (!set) sets.set(id, (set = new Map()));
        for (const e of slice.endpoints[i]) {
          if (set.has(e.key) && !e.isLocal) continue;
          set.set(e.key, e);
        }
      }
    }
    for (const [id, set] of sets) {
      if (set.size === 0) continue;
      out.set(
        id,
        [...set.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)),
      );
    }
    return out;
  }
}
