/**
 * LISTEN_BACKLOG: connections the kernel completes and queues on a listening
 * socket before kproxy accepts them (capped by net.core.somaxconn, 4096 on
 * current kernels), as Go's listeners (kube-proxy's) get somaxconn. With
 * Node's default of 511 a flood of connections fills the queue whenever the
 * event loop is busy, and a new client (the kubelet's probe, a Service's
 * client in userspace mode) is dropped in the SYN queue: its retries come 1,
 * 3 and 7 s later. Queued, it waits only for the loop. Every listener kproxy
 * opens uses it.
 */
export const LISTEN_BACKLOG = 4096;
