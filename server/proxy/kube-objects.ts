/**
 * The shapes of the Kubernetes objects kproxy reads. Objects arrive either from
 * @kubernetes/client-node (typed, timestamps as Date) or from manifest files
 * (plain YAML, timestamps as strings, anything may be missing or of the wrong
 * type), so the converters treat every field as untrusted.
 */
export interface ObjectMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  deletionTimestamp?: Date | string | null;
  creationTimestamp?: Date | string | null;
}

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
}

export interface ServiceSpecPort {
  name?: string;
  protocol?: string;
  port?: number;
  targetPort?: number | string;
  nodePort?: number;
  appProtocol?: string;
}

export interface LoadBalancerIngress {
  ip?: string;
  hostname?: string;
  ipMode?: string;
}

export interface Service extends KubeObject {
  spec?: {
    type?: string;
    clusterIP?: string;
    clusterIPs?: string[];
    ipFamilies?: string[];
    ipFamilyPolicy?: string;
    ports?: ServiceSpecPort[];
    externalIPs?: string[];
    loadBalancerIP?: string;
    loadBalancerSourceRanges?: string[];
    externalTrafficPolicy?: string;
    internalTrafficPolicy?: string;
    healthCheckNodePort?: number;
    sessionAffinity?: string;
    sessionAffinityConfig?: { clientIP?: { timeoutSeconds?: number } };
    externalName?: string;
    selector?: Record<string, string>;
    trafficDistribution?: string;
  };
  status?: { loadBalancer?: { ingress?: LoadBalancerIngress[] } };
}

export interface EndpointConditions {
  ready?: boolean | null;
  serving?: boolean | null;
  terminating?: boolean | null;
}

export interface SliceEndpoint {
  addresses?: string[];
  conditions?: EndpointConditions;
  nodeName?: string;
  zone?: string;
  hostname?: string;
  hints?: { forZones?: { name?: string }[]; forNodes?: { name?: string }[] };
  targetRef?: { kind?: string; namespace?: string; name?: string };
}

export interface EndpointPort {
  name?: string | null;
  port?: number | null;
  protocol?: string;
  appProtocol?: string;
}

export interface EndpointSlice extends KubeObject {
  addressType?: string;
  endpoints?: SliceEndpoint[];
  ports?: EndpointPort[] | null;
}

export interface Taint {
  key?: string;
  value?: string;
  effect?: string;
}

export interface Node extends KubeObject {
  spec?: { podCIDR?: string; podCIDRs?: string[]; taints?: Taint[]; unschedulable?: boolean; providerID?: string };
  status?: { addresses?: { type?: string; address?: string }[] };
}

/** ServiceCIDR (networking.k8s.io/v1): a range the API server allocates cluster IPs from. */
export interface ServiceCIDR extends KubeObject {
  spec?: { cidrs?: string[] };
}

/** Label and annotation keys kproxy reads, as Kubernetes defines them. */
export const LABEL_SERVICE_NAME = 'kubernetes.io/service-name';
export const LABEL_SERVICE_PROXY_NAME = 'service.kubernetes.io/service-proxy-name';
export const LABEL_HEADLESS = 'service.kubernetes.io/headless';
export const LABEL_TOPOLOGY_ZONE = 'topology.kubernetes.io/zone';
export const ANNOTATION_LAST_CHANGE_TRIGGER_TIME = 'endpoints.kubernetes.io/last-change-trigger-time';
export const TAINT_TO_BE_DELETED = 'ToBeDeletedByClusterAutoscaler';

/** objectKey returns "namespace/name" (or just "name" for cluster-scoped objects). */
export function objectKey(obj: KubeObject | null | undefined): string {
  const ns = obj?.metadata?.namespace;
  const name = obj?.metadata?.name ?? '<unnamed>';
  return ns ? `${ns}/${name}` : name;
}

/** objectRef names an object for log lines and errors: "Service default/web". */
export function objectRef(kind: string, obj: KubeObject | null | undefined): string {
  return `${kind} ${objectKey(obj)}`;
}
