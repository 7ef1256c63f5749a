/**
 * The userspace mode's public file: what the composition builds the mode
 * with (and its relay's metrics), what the backend reports (its intent, the
 * relay's figures and limits), and the names of the portal chains, which the
 * dashboard and the tracer read the kernel by. Nothing outside server/proxy
 * imports another file of this folder (the kproxy/layers rule).
 */
export { createHostUserspaceBackend, type DryRunUserspaceKernel, type HostUserspace } from './host.ts';
export { registerUserspaceMetrics } from './metrics.ts';
export type { PortalPort, UserspaceBackend, UserspaceIntent } from './proxier.ts';
export type { RelayStats } from './relay-stats.ts';
export type { RelayLimits } from './proxy-socket.ts';
export { KUBE_NODEPORT_CONTAINER, KUBE_PORTALS_CONTAINER, PORTAL_CHAINS, PORTAL_JUMPS } from './portals.ts';
