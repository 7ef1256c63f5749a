/**
 * The KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) document as a
 * schema: every field kube-proxy's v1alpha1 type has, with its JSON name and Go
 * type. The strict decoder walks it (unknown fields are errors, like
 * kube-proxy's strict decoding), and the TypeScript type of a decoded document
 * is inferred from it, so the two cannot drift apart.
 *
 * Field list: staging/src/k8s.io/kube-proxy/config/v1alpha1/types.go, plus
 * ClientConnectionConfiguration (component-base) and LoggingConfiguration
 * (component-base/logs/api/v1).
 */

export const API_VERSION = 'kubeproxy.config.k8s.io/v1alpha1';
export const KIND = 'KubeProxyConfiguration';

/** FieldKind is a Go field type as the decoder checks it. */
export type FieldSchema =
  | { readonly kind: 'string' }
  | { readonly kind: 'bool' }
  /** int32: a whole number within Go's int32 range. */
  | { readonly kind: 'int32' }
  | { readonly kind: 'uint32' }
  | { readonly kind: 'float' }
  /** duration: a metav1.Duration string ("30s"), decoded to milliseconds. */
  | { readonly kind: 'duration' }
  /** durationOrNanos: component-base TimeOrMetaDuration, a duration string or integer nanoseconds. */
  | { readonly kind: 'durationOrNanos' }
  /** quantity: a resource.QuantityValue ("0", "64Ki" or a number), kept as text. */
  | { readonly kind: 'quantity' }
  | { readonly kind: 'strings' }
  | { readonly kind: 'boolMap' }
  | { readonly kind: 'object'; readonly fields: Readonly<Record<string, FieldSchema>> }
  | { readonly kind: 'list'; readonly item: FieldSchema };

const str = { kind: 'string' } as const;
const bool = { kind: 'bool' } as const;
const int32 = { kind: 'int32' } as const;
const uint32 = { kind: 'uint32' } as const;
const float = { kind: 'float' } as const;
const duration = { kind: 'duration' } as const;
const strings = { kind: 'strings' } as const;
function object<const F extends Record<string, FieldSchema>>(fields: F) {
  return { kind: 'object', fields } as const;
}

const formatOptions = object({ splitStream: bool, infoBufferSize: { kind: 'quantity' } });

/** KUBE_PROXY_CONFIGURATION_SCHEMA is the whole v1alpha1 document. */
export const KUBE_PROXY_CONFIGURATION_SCHEMA = object({
  apiVersion: str,
  kind: str,
  featureGates: { kind: 'boolMap' },
  clientConnection: object({
    kubeconfig: str,
    acceptContentTypes: str,
    contentType: str,
    qps: float,
    burst: int32,
  }),
  logging: object({
    format: str,
    flushFrequency: { kind: 'durationOrNanos' },
    verbosity: uint32,
    vmodule: { kind: 'list', item: object({ filePattern: str, verbosity: uint32 }) },
    options: object({ text: formatOptions, json: formatOptions }),
  }),
  hostnameOverride: str,
  bindAddress: str,
  healthzBindAddress: str,
  metricsBindAddress: str,
  bindAddressHardFail: bool,
  enableProfiling: bool,
  showHiddenMetricsForVersion: str,
  mode: str,
  iptables: object({
    masqueradeBit: int32,
    masqueradeAll: bool,
    localhostNodePorts: bool,
    syncPeriod: duration,
    minSyncPeriod: duration,
  }),
  ipvs: object({
    syncPeriod: duration,
    minSyncPeriod: duration,
    scheduler: str,
    excludeCIDRs: strings,
    strictARP: bool,
    tcpTimeout: duration,
    tcpFinTimeout: duration,
    udpTimeout: duration,
  }),
  nftables: object({
    masqueradeBit: int32,
    masqueradeAll: bool,
    syncPeriod: duration,
    minSyncPeriod: duration,
  }),
  winkernel: object({
    networkName: str,
    sourceVip: str,
    enableDSR: bool,
    rootHnsEndpointName: str,
    forwardHealthCheckVip: bool,
  }),
  detectLocalMode: str,
  detectLocal: object({ bridgeInterface: str, interfaceNamePrefix: str }),
  clusterCIDR: str,
  nodePortAddresses: strings,
  oomScoreAdj: int32,
  conntrack: object({
    maxPerCore: int32,
    min: int32,
    tcpEstablishedTimeout: duration,
    tcpCloseWaitTimeout: duration,
    tcpBeLiberal: bool,
    udpTimeout: duration,
    udpStreamTimeout: duration,
  }),
  configSyncPeriod: duration,
  portRange: str,
  /** udpIdleTimeout: the userspace proxy's UDP session timeout (in v1alpha1 until kube-proxy 1.25; kproxy's userspace mode reads it). */
  udpIdleTimeout: duration,
  windowsRunAsService: bool,
});

/** Decoded is the TypeScript value a schema decodes to; absent or null fields are undefined (Go's nil). */
export type Decoded<S> = S extends { kind: 'string' | 'quantity' }
  ? string
  : S extends { kind: 'bool' }
    ? boolean
    : S extends { kind: 'int32' | 'uint32' | 'float' | 'duration' | 'durationOrNanos' }
      ? number
      : S extends { kind: 'strings' }
        ? string[]
        : S extends { kind: 'boolMap' }
          ? Record<string, boolean>
          : S extends { kind: 'list'; item: infer I }
            ? Decoded<I>[]
            : S extends { kind: 'object'; fields: infer F }
              ? { -readonly [K in keyof F]?: Decoded<F[K]> }
              : never;

/**
 * KubeProxyConfigurationDocument is a decoded --config file: every field
 * optional, durations in milliseconds. A field that is undefined was absent or
 * null, which kube-proxy's defaulting treats like Go's nil pointer.
 */
export type KubeProxyConfigurationDocument = Decoded<typeof KUBE_PROXY_CONFIGURATION_SCHEMA>;

type Complete<T> = T extends (infer E)[] ? Complete<E>[] : T extends object ? { -readonly [K in keyof T]-?: Complete<T[K]> } : T;

/**
 * KubeProxyConfiguration is the v1alpha1 document after kube-proxy's defaulting
 * (and kproxy's flags): every field present. Validation runs on this form, so
 * errors name fields exactly as they are spelt in the YAML.
 */
export type KubeProxyConfiguration = Complete<KubeProxyConfigurationDocument>;
