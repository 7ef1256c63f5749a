/**
 * The kproxy error catalogue. Every failure kproxy reports has a permanent
 * KPROXY_ERR_* code (operators grep logs and alert on them, the dashboard groups
 * by them), a message that names the object involved, and the underlying cause.
 * Codes are never renamed or reused; add new ones at the end of their section.
 */
export class KproxyError extends Error {
  readonly code: string;
  /**
   * statusCode is the HTTP status this error answers a request with (fastify
   * reads the same name); 500 unless the catalogue says otherwise.
   */
  readonly statusCode: number;
  constructor(code: string, message: string, options?: { cause?: unknown }, statusCode = 500) {
    super(message, options);
    this.code = code;
    this.statusCode = statusCode;
    this.name = 'KproxyError';
  }
}

/** isKproxyError narrows an unknown thrown value to a KproxyError. */
export function isKproxyError(err: unknown): err is KproxyError {
  return err instanceof KproxyError;
}

/** errorMessage renders any thrown value as one line, with its cause chain. */
export function errorMessage(err: unknown): string {
  const parts: string[] = [];
  let cur: unknown = err;
  for (let depth = 0; cur != null && depth < 5; depth++) {
    if (cur instanceof Error) {
      const first = cur.message.split('\n')[0].trim();
      // A cause whose text the message already quotes adds nothing but noise.
      if (!parts.some((p) => p.includes(first))) parts.push(cur instanceof KproxyError ? `${first} [${cur.code}]` : first);
      cur = cur.cause;
    } else {
      parts.push(String(cur));
      break;
    }
  }
  return parts.join(': ');
}

/** define makes a catalogue entry: a class per code, with the HTTP status a request failing with it gets. */
function define(code: string, statusCode = 500) {
  return class extends KproxyError {
    static readonly code = code;
    static readonly statusCode = statusCode;
    constructor(message: string, options?: { cause?: unknown }) {
      super(code, message, options, statusCode);
    }
  };
}

// --- configuration and command line (exit 1 before anything is touched)
export const ConfigInvalidError = define('KPROXY_ERR_CONFIG_INVALID');
export const ConfigFileError = define('KPROXY_ERR_CONFIG_FILE');
export const FlagInvalidError = define('KPROXY_ERR_FLAG_INVALID');
export const SourceInvalidError = define('KPROXY_ERR_SOURCE_INVALID');
/** NoSourceError: nothing says where Services come from on a real run (the example cluster is --dry-run only). */
export const NoSourceError = define('KPROXY_ERR_NO_SOURCE');

// --- input objects (skipped, counted, never fatal)
export const ServiceInvalidError = define('KPROXY_ERR_SERVICE_INVALID');
export const EndpointSliceInvalidError = define('KPROXY_ERR_ENDPOINTSLICE_INVALID');
export const ManifestParseError = define('KPROXY_ERR_MANIFEST_PARSE');

// --- sources
export const WatchFailedError = define('KPROXY_ERR_WATCH_FAILED');
export const ListFailedError = define('KPROXY_ERR_LIST_FAILED');
export const KubeconfigError = define('KPROXY_ERR_KUBECONFIG');
export const EventRecordError = define('KPROXY_ERR_EVENT_RECORD');
/** SourceNotSyncedError: a source never read completely (--once exits 1 with it, touching nothing). */
export const SourceNotSyncedError = define('KPROXY_ERR_SOURCE_NOT_SYNCED');
/** NodeNotFoundError: the API server has no Node by this node's name (--once exits 1 with it, touching nothing). */
export const NodeNotFoundError = define('KPROXY_ERR_NODE_NOT_FOUND');

// --- kernel runners
export const CommandFailedError = define('KPROXY_ERR_COMMAND_FAILED');
export const CommandNotFoundError = define('KPROXY_ERR_COMMAND_NOT_FOUND');
export const CommandTimeoutError = define('KPROXY_ERR_COMMAND_TIMEOUT');
export const RestoreFailedError = define('KPROXY_ERR_RESTORE_FAILED');
export const SaveFailedError = define('KPROXY_ERR_SAVE_FAILED');
export const KernelModuleMissingError = define('KPROXY_ERR_KERNEL_MODULE_MISSING');
export const SysctlError = define('KPROXY_ERR_SYSCTL');
export const ConntrackError = define('KPROXY_ERR_CONNTRACK');
export const IpsetError = define('KPROXY_ERR_IPSET');
export const IpvsError = define('KPROXY_ERR_IPVS');
export const NetlinkError = define('KPROXY_ERR_NETLINK');
export const NfacctError = define('KPROXY_ERR_NFACCT');
export const IptablesParseError = define('KPROXY_ERR_IPTABLES_PARSE');
export const IptablesFlavorError = define('KPROXY_ERR_IPTABLES_FLAVOR');
/** NftTransactionError: `nft -f` refused a transaction; nothing of it was applied (nftables transactions are atomic). */
export const NftTransactionError = define('KPROXY_ERR_NFT_TRANSACTION');
export const NftListError = define('KPROXY_ERR_NFT_LIST');
/** NftUnsupportedError: this host cannot run nftables mode (no nft, nft or kernel too old, no nf_tables). */
export const NftUnsupportedError = define('KPROXY_ERR_NFT_UNSUPPORTED');

// --- proxy
export const SyncFailedError = define('KPROXY_ERR_SYNC_FAILED');
/** SyncVerifyError: after a full sync the kernel did not hold what it wrote (proxy/sync-verify.ts). */
export const SyncVerifyError = define('KPROXY_ERR_SYNC_VERIFY');
export const RuleBuildError = define('KPROXY_ERR_RULE_BUILD');
export const CleanupFailedError = define('KPROXY_ERR_CLEANUP_FAILED');
export const ProxyModeUnsupportedError = define('KPROXY_ERR_PROXY_MODE_UNSUPPORTED');

// --- userspace mode (the relay)
/** ProxyPortBindError: a proxy socket, a node port or an external IP's port could not be bound (the port is left out, never fatal). */
export const ProxyPortBindError = define('KPROXY_ERR_PROXY_PORT_BIND');

// --- node-facing servers
export const ListenFailedError = define('KPROXY_ERR_LISTEN_FAILED');
export const HealthCheckPortError = define('KPROXY_ERR_HEALTHCHECK_PORT');
/** TlsReloadError: a changed certificate or key does not load; the previous pair stays in service. */
export const TlsReloadError = define('KPROXY_ERR_TLS_RELOAD');

// --- dashboard and API (the second argument is the HTTP status of a request that fails with it)
export const AuthRequiredError = define('KPROXY_ERR_AUTH_REQUIRED', 401);
export const AuthFailedError = define('KPROXY_ERR_AUTH_FAILED', 401);
export const ForbiddenError = define('KPROXY_ERR_FORBIDDEN', 403);
export const OriginRejectedError = define('KPROXY_ERR_ORIGIN_REJECTED', 403);
export const RateLimitedError = define('KPROXY_ERR_RATE_LIMITED', 429);
export const InsecureBindError = define('KPROXY_ERR_INSECURE_BIND');
export const SlowClientError = define('KPROXY_ERR_SLOW_CLIENT');
export const NotFoundError = define('KPROXY_ERR_NOT_FOUND', 404);
export const TooManyClientsError = define('KPROXY_ERR_TOO_MANY_CLIENTS', 503);
/** AuthUnavailableError: the API server could not be asked about a token (delegated auth fails closed). */
export const AuthUnavailableError = define('KPROXY_ERR_AUTH_UNAVAILABLE', 503);
/** RequestInvalidError: a request fastify refused (schema validation, bad JSON). */
export const RequestInvalidError = define('KPROXY_ERR_REQUEST_INVALID', 400);
export const RequestTooLargeError = define('KPROXY_ERR_REQUEST_TOO_LARGE', 413);
export const MediaTypeUnsupportedError = define('KPROXY_ERR_MEDIA_TYPE_UNSUPPORTED', 415);
export const MethodNotAllowedError = define('KPROXY_ERR_METHOD_NOT_ALLOWED', 405);
/** InternalError: a thrown value that is not a catalogue error (a bug), as a request's answer. */
export const InternalError = define('KPROXY_ERR_INTERNAL', 500);
/** SyncsPausedError: an action that needs syncs (a resync) was asked while they are paused. */
export const SyncsPausedError = define('KPROXY_ERR_SYNCS_PAUSED', 409);

// --- packet tracer (kproxy trace, GET /api/v1/trace)
/** TraceInputError: a trace's packet is not valid (the message names the field: proto, src, dst, from); exit 1 / HTTP 400. */
export const TraceInputError = define('KPROXY_ERR_TRACE_INPUT', 400);
/** TraceUnavailableError: the rules cannot be traced (no kernel read, or a mode the tracer does not know). */
export const TraceUnavailableError = define('KPROXY_ERR_TRACE_UNAVAILABLE', 503);
