import { join } from 'node:path';
import { NsClient } from './client.ts';
import { Kproxy, type Flavor, type KproxyOptions } from './kproxy.ts';
import { ManifestDir, nodeObject } from './manifests.ts';
import { addNamespace, deleteNamespace, HARNESS_PREFIX, ipBatch, listNamespaces, nsExec, nsSysctl } from './netns.ts';
import {
  CLIENT_IP,
  CLIENT_IP6,
  CLUSTER_CIDR,
  CLUSTER_CIDR6,
  EXTERNAL_IP,
  EXTERNAL_IP6,
  LB_IP,
  LB_IP6,
  NODE_A,
  NODE_A6,
  NODE_A_TO_B,
  NODE_A_TO_B6,
  NODE_B,
  NODE_B6,
  OTHER_CLIENT_IP,
  OTHER_CLIENT_IP6,
  PODS,
  POD_TCP_PORT,
  POD_UDP_PORT,
  POD_BULK_PORT,
  type PodName,
} from './plan.ts';
import { ProcessTracker } from './processes.ts';

/**
 * The test cluster, all in network namespaces joined by veth pairs:
 *
 *   client 10.0.0.2, 10.0.0.3 ── cli0 ─┐
 *                                      node-a (runs kproxy)  10.0.0.10 node IP,
 *                                      │  10.0.0.20 external IP, 10.0.0.21 LB IP (extra addresses on cli0)
 *            pods a0 a1 a2 ── a0..a2 ──┤  10.244.0.0/24, gateway 10.244.0.1 on each pod link
 *                                      └─ nb0 10.0.1.10 ── node-b 10.0.1.11 ── pods b0 b1 (10.244.1.0/24)
 *
 * Node-a's default route points at the client, which stands for the rest of
 * the network (and does not forward).
 *
 * Pods are wired like a point-to-point CNI (ptp, Calico): a /32 on the pod,
 * a host route per pod on its node, no bridge (a bridge would pull in
 * br_netfilter, which is global to the machine). Node-a forwards between the
 * client, its pods and node-b; node-b routes node-a's traffic to its pods.
 * Every pod runs backend-server.ts on TCP 8080 and UDP 9053.
 *
 * A dual-stack cluster (create({ ipv6: true })) puts the IPv6 addresses of
 * plan.ts on the same links (nodad, so they are usable at once), with the same
 * routes, forwarding on both nodes and the backends listening on both families.
 */

const SERVER = join(import.meta.dirname, 'backend-server.ts');
let clusters = 0;

/**
 * TestCluster owns everything it creates: namespaces, processes, the
 * manifest folder. destroy() removes all of it and checks that no namespace
 * of this test process is left; create() cleans up after itself if it fails
 * half-way.
 */
export class TestCluster {
  readonly prefix: string;
  readonly ns: { client: string; nodeA: string; nodeB: string; pods: Record<PodName, string> };
  readonly manifests = new ManifestDir();
  readonly processes = new ProcessTracker();
  readonly kproxy: Kproxy;
  /** ipv6: the cluster is dual-stack (IPv6 addresses, routes and node objects besides the IPv4 ones). */
  readonly ipv6: boolean;
  readonly #created: string[] = [];
  readonly #clients = new Map<string, NsClient>();

  private constructor(opts: { ipv6?: boolean }) {
    this.ipv6 = opts.ipv6 ?? false;
    this.prefix = `${HARNESS_PREFIX}${++clusters}-`;
    const n = (s: string) => this.prefix + s;
    this.ns = {
      client: n('client'),
      nodeA: n('node-a'),
      nodeB: n('node-b'),
      pods: Object.fromEntries(Object.keys(PODS).map((p) => [p, n(`pod-${p}`)])) as Record<PodName, string>,
    };
    this.kproxy = new Kproxy(this.ns.nodeA, this.processes);
    this.manifests.write('nodes', [
      nodeObject(NODE_A.name, NODE_A.ip, NODE_A.podCIDR, { ipv6: this.ipv6 ? NODE_A6 : undefined }),
      nodeObject(NODE_B.name, NODE_B.ip, NODE_B.podCIDR, { ipv6: this.ipv6 ? NODE_B6 : undefined }),
    ]);
  }

  static async create(opts: { ipv6?: boolean } = {}): Promise<TestCluster> {
    const c = new TestCluster(opts);
    try {
      await c.#build();
    } catch (err) {
      await c.destroy().catch((e: Error) => {
        (err as Error).message += `\n(and cleaning up after it failed: ${e.message})`;
      });
      throw err;
    }
    return c;
  }

  async #build(): Promise<void> {
    const { client, nodeA, nodeB, pods } = this.ns;
    for (const name of [client, nodeA, nodeB, ...Object.values(pods)]) {
      await addNamespace(name);
      this.#created.push(name);
    }
    const podsOn = (node: string) => (Object.keys(PODS) as PodName[]).filter((p) => PODS[p].node === node);
    // veth pairs are created inside the namespaces, never in the root namespace.
    await ipBatch(nodeA, [
      'link set lo up',
      `link add cli0 type veth peer name eth0 netns ${client}`,
      `link add nb0 type veth peer name eth0 netns ${nodeB}`,
      ...podsOn(NODE_A.name).map((p) => `link add ${p} type veth peer name eth0 netns ${pods[p]}`),
      `addr add ${NODE_A.ip}/24 dev cli0`,
      `addr add ${EXTERNAL_IP}/32 dev cli0`,
      `addr add ${LB_IP}/32 dev cli0`,
      'link set cli0 up',
      `addr add ${NODE_A_TO_B}/24 dev nb0`,
      'link set nb0 up',
      ...podsOn(NODE_A.name).flatMap((p) => [`addr add ${NODE_A.podGateway}/32 dev ${p}`, `link set ${p} up`, `route add ${PODS[p].ip}/32 dev ${p}`]),
      `route add ${NODE_B.podCIDR} via ${NODE_B.ip}`,
      // A real node has a default route; without one, traffic to a cluster IP that is
      // not DNATed (no endpoints) fails routing before the filter table can REJECT it.
      // The client stands for the rest of the network (it does not forward).
      `route add default via ${CLIENT_IP}`,
    ]);
    await ipBatch(nodeB, [
      'link set lo up',
      ...podsOn(NODE_B.name).map((p) => `link add ${p} type veth peer name eth0 netns ${pods[p]}`),
      `addr add ${NODE_B.ip}/24 dev eth0`,
      'link set eth0 up',
      `route add default via ${NODE_A_TO_B}`,
      ...podsOn(NODE_B.name).flatMap((p) => [`addr add ${NODE_B.podGateway}/32 dev ${p}`, `link set ${p} up`, `route add ${PODS[p].ip}/32 dev ${p}`]),
    ]);
    await ipBatch(client, ['link set lo up', `addr add ${CLIENT_IP}/24 dev eth0`, `addr add ${OTHER_CLIENT_IP}/24 dev eth0`, 'link set eth0 up', `route add default via ${NODE_A.ip}`]);
    await Promise.all(
      (Object.keys(PODS) as PodName[]).map((p) => {
        const gw = PODS[p].node === NODE_A.name ? NODE_A.podGateway : NODE_B.podGateway;
        return ipBatch(pods[p], ['link set lo up', `addr add ${PODS[p].ip}/32 dev eth0`, 'link set eth0 up', `route add ${gw} dev eth0 scope link`, `route add default via ${gw} dev eth0`]);
      }),
    );
    if (this.ipv6) await this.#buildIPv6();
    for (const node of [nodeA, nodeB]) await nsSysctl(node, 'net.ipv4.ip_forward', '1');
    // The per-destination ICMP error limit must be off on node-a because on recent kernels
    // (seen on 6.18: IcmpOutRateLimitHost counts the very first error to a new peer) it
    // swallows the port-unreachable that kube-proxy's REJECT rules send, and a rejected
    // connection would look dropped. The global limit (icmp_msgs_per_sec) stays.
    await nsSysctl(nodeA, 'net.ipv4.icmp_ratelimit', '0');
    await Promise.all((Object.keys(PODS) as PodName[]).map((p) => this.#startServer(p)));
  }

  /** #buildIPv6 adds the IPv6 half of plan.ts to the links #build made. */
  async #buildIPv6(): Promise<void> {
    const { client, nodeA, nodeB, pods } = this.ns;
    const podsOn = (node: string) => (Object.keys(PODS) as PodName[]).filter((p) => PODS[p].node === node);
    await ipBatch(nodeA, [
      `addr add ${NODE_A6.ip}/64 dev cli0 nodad`,
      `addr add ${EXTERNAL_IP6}/128 dev cli0 nodad`,
      `addr add ${LB_IP6}/128 dev cli0 nodad`,
      `addr add ${NODE_A_TO_B6}/64 dev nb0 nodad`,
      ...podsOn(NODE_A.name).flatMap((p) => [`addr add ${NODE_A6.podGateway}/128 dev ${p} nodad`, `route add ${PODS[p].ip6}/128 dev ${p}`]),
      `route add ${NODE_B6.podCIDR} via ${NODE_B6.ip}`,
      `route add default via ${CLIENT_IP6}`,
    ]);
    await ipBatch(nodeB, [
      `addr add ${NODE_B6.ip}/64 dev eth0 nodad`,
      `route add default via ${NODE_A_TO_B6}`,
      ...podsOn(NODE_B.name).flatMap((p) => [`addr add ${NODE_B6.podGateway}/128 dev ${p} nodad`, `route add ${PODS[p].ip6}/128 dev ${p}`]),
    ]);
    await ipBatch(client, [`addr add ${CLIENT_IP6}/64 dev eth0 nodad`, `addr add ${OTHER_CLIENT_IP6}/64 dev eth0 nodad`, `route add default via ${NODE_A6.ip}`]);
    await Promise.all(
      (Object.keys(PODS) as PodName[]).map((p) => {
        const gw = PODS[p].node === NODE_A.name ? NODE_A6.podGateway : NODE_B6.podGateway;
        return ipBatch(pods[p], [`addr add ${PODS[p].ip6}/128 dev eth0 nodad`, `route add ${gw} dev eth0`, `route add default via ${gw} dev eth0`]);
      }),
    );
    for (const node of [nodeA, nodeB]) await nsSysctl(node, 'net.ipv6.conf.all.forwarding', '1');
    // As for IPv4: the ICMPv6 error rate limit would swallow REJECT's port-unreachable.
    await nsSysctl(nodeA, 'net.ipv6.icmp.ratelimit', '0');
  }

  async #startServer(p: PodName): Promise<void> {
    const proc = this.processes.start(`backend ${p}`, this.ns.pods[p], [
      process.execPath,
      SERVER,
      p,
      '--tcp',
      String(POD_TCP_PORT),
      '--udp',
      String(POD_UDP_PORT),
      '--bulk',
      String(POD_BULK_PORT),
      ...(this.ipv6 ? ['--ipv6'] : []),
    ]);
    await new Promise<void>((resolve, reject) => {
      const stop = proc.log.onLine((line) => {
        if (line === 'ready') {
          stop();
          resolve();
        }
      });
      void proc.exited.then((code) => reject(new Error(`backend ${p} exited (${code}) before it was ready: ${proc.log.tail(20)}`)));
    });
  }

  /** client returns the agent that connects from a namespace (the client by default, node-a itself, or a pod). */
  client(where: 'client' | 'node-a' | PodName = 'client'): NsClient {
    const ns = where === 'client' ? this.ns.client : where === 'node-a' ? this.ns.nodeA : this.ns.pods[where];
    let c = this.#clients.get(ns);
    if (!c) {
      c = new NsClient(ns, this.processes);
      this.#clients.set(ns, c);
    }
    return c;
  }

  /** startKproxy runs the daemon on node-a over this cluster's manifests. */
  startKproxy(flavor: Flavor, extraArgs: readonly string[] = []): Promise<void> {
    return this.kproxy.start(this.kproxyOptions(flavor, extraArgs));
  }

  kproxyOptions(flavor: Flavor, extraArgs: readonly string[] = []): KproxyOptions {
    return { manifests: this.manifests.path, flavor, nodeName: NODE_A.name, clusterCIDR: this.ipv6 ? `${CLUSTER_CIDR},${CLUSTER_CIDR6}` : CLUSTER_CIDR, extraArgs };
  }

  /** iptablesSave lists node-a's rules in one flavour (what a failure report shows). */
  async iptablesSave(flavor: Flavor, family: 'IPv4' | 'IPv6' = 'IPv4'): Promise<string> {
    const bin = `${family === 'IPv6' ? 'ip6tables' : 'iptables'}-${flavor}-save`;
    const r = await nsExec(this.ns.nodeA, [bin]);
    return r.code === 0 ? r.stdout : `${bin} failed (${r.code}): ${r.stderr}`;
  }

  /** nftTable lists node-a's kube-proxy nftables table (what nftables mode programs). */
  async nftTable(): Promise<string> {
    const r = await nsExec(this.ns.nodeA, ['nft', 'list', 'table', 'ip', 'kube-proxy']);
    return r.code === 0 ? r.stdout : `(no kube-proxy table: ${r.stderr.trim()})`;
  }

  /** diagnostics is what a failing test attaches: node-a's rules in both iptables flavours and nftables, and kproxy's log tail. */
  async diagnostics(): Promise<string> {
    const [nft, legacy, table] = await Promise.all([this.iptablesSave('nft'), this.iptablesSave('legacy'), this.nftTable()]);
    const v6 = this.ipv6 ? await Promise.all([this.iptablesSave('nft', 'IPv6'), this.iptablesSave('legacy', 'IPv6')]) : null;
    return [
      `--- iptables-nft-save in ${this.ns.nodeA} ---`,
      nft.trim(),
      `--- iptables-legacy-save in ${this.ns.nodeA} ---`,
      legacy.trim() || '(empty)',
      `--- nft list table ip kube-proxy in ${this.ns.nodeA} ---`,
      table.trim(),
      ...(v6 ? [`--- ip6tables-nft-save in ${this.ns.nodeA} ---`, v6[0].trim(), `--- ip6tables-legacy-save in ${this.ns.nodeA} ---`, v6[1].trim() || '(empty)'] : []),
      '--- kproxy log (last 80 lines) ---',
      this.kproxy.log.tail(80),
    ].join('\n');
  }

  /**
   * destroy ends every process this cluster started (by PID), deletes its
   * namespaces (which removes the veth pairs), removes the manifests, and
   * fails if a namespace of this test process is still there.
   */
  async destroy(): Promise<void> {
    await this.processes.stopAll();
    const errors: string[] = [];
    for (const name of this.#created.splice(0).reverse()) {
      await deleteNamespace(name).catch((e: Error) => errors.push(e.message));
    }
    this.manifests.destroy();
    const left = listNamespaces().filter((n) => n.startsWith(this.prefix));
    if (left.length || errors.length) throw new Error(`test cluster teardown left namespaces ${left.join(', ') || '(none)'}: ${errors.join('; ')}`);
  }
}
