/**
 * Records the rule sets the packet tracer's unit tests trace
 * (server/trace/testdata/*-matrix/): the behaviour matrix's Services
 * (harness/trace-matrix.ts) programmed by kproxy into a real kernel, in
 * iptables mode (nft flavour: `iptables-nft-save -c`) and nftables mode
 * (`nft -j list table ip kube-proxy`) and userspace mode (its portals:
 * `iptables-nft-save -c`), with node-a's addresses. Run as root
 * after `npm run build`:
 *
 *   node test/kernel/record-trace-testdata.ts
 *
 * Everything happens in namespaces this script creates and removes. IPVS mode
 * has no kernel here: ipvs-matrix/input.yaml holds the same Services as
 * manifests, which the unit test programs into IPVS mode's simulated kernel.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { nodeObject, serviceCIDRObject, serviceObjects } from './harness/manifests.ts';
import { CLUSTER_CIDR, EXTERNAL_IP, LB_IP, NODE_A, NODE_A_TO_B, NODE_B } from './harness/plan.ts';
import { nsRun } from './harness/netns.ts';
import { TestCluster } from './harness/topology.ts';
import { stringify } from 'yaml';
import { MATRIX_ROWS, MATRIX_SERVICES, SERVICE_CIDR } from './harness/trace-matrix.ts';

const OUT = join(import.meta.dirname, '../../server/trace/testdata');

const ipvsInput = [
  { kind: 'GoldenOptions', config: { clusterCIDRs: [CLUSTER_CIDR] }, links: { lo: ['127.0.0.1/8'], cli0: [`${NODE_A.ip}/24`, `${EXTERNAL_IP}/32`, `${LB_IP}/32`], nb0: [`${NODE_A_TO_B}/24`] } },
  nodeObject(NODE_A.name, NODE_A.ip, NODE_A.podCIDR),
  nodeObject(NODE_B.name, NODE_B.ip, NODE_B.podCIDR),
  ...MATRIX_SERVICES.flatMap((s) => serviceObjects(s.spec, s.endpoints)),
];
writeFileSync(
  join(OUT, 'ipvs-matrix', 'input.yaml'),
  `# The behaviour matrix's cluster (test/kernel/harness/trace-matrix.ts) for IPVS mode's simulated kernel, written by test/kernel/record-trace-testdata.ts.\n${ipvsInput.map((o) => stringify(o)).join('---\n')}`,
);

const cluster = await TestCluster.create();
try {
  cluster.manifests.write('service-cidr', [serviceCIDRObject('kubernetes', [SERVICE_CIDR])]);
  for (const s of MATRIX_SERVICES) cluster.manifests.writeService(s.spec, s.endpoints);
  const ns = cluster.ns.nodeA;
  const addresses = JSON.parse(await nsRun(ns, ['ip', '-j', 'addr', 'show'])) as { addr_info: { local: string }[] }[];
  // Link-local addresses change with every run (random MACs) and no Service rule looks at them.
  const local = [...new Set(addresses.flatMap((l) => l.addr_info.map((a) => a.local)))].filter((a) => !a.startsWith('fe80:'));
  const packets = MATRIX_ROWS.map((r) => ({ name: r.name, proto: r.proto, src: r.sender.ip, dst: `${r.dst}:${r.port}`, from: r.from }));
  for (const dir of ['iptables-matrix', 'nftables-matrix', 'ipvs-matrix', 'userspace-matrix']) {
    mkdirSync(join(OUT, dir), { recursive: true });
    writeFileSync(join(OUT, dir, 'addresses.json'), JSON.stringify(local, null, 2) + '\n');
    writeFileSync(join(OUT, dir, 'packets.yaml'), `# The behaviour matrix's packets (test/kernel/harness/trace-matrix.ts), written by test/kernel/record-trace-testdata.ts.\n${stringify(packets)}`);
  }

  await cluster.startKproxy('nft');
  writeFileSync(join(OUT, 'iptables-matrix', 'iptables-save.txt'), await nsRun(ns, ['iptables-nft-save', '-c']));
  await cluster.kproxy.stop();

  await cluster.startKproxy('nft', ['--proxy-mode', 'nftables']);
  const listed = await nsRun(ns, ['nft', '-j', 'list', 'table', 'ip', 'kube-proxy']);
  writeFileSync(join(OUT, 'nftables-matrix', 'nft-list.json'), JSON.stringify(JSON.parse(listed), null, 1) + '\n');
  await cluster.kproxy.stop();

  await cluster.startKproxy('nft', ['--proxy-mode', 'userspace']);
  writeFileSync(join(OUT, 'userspace-matrix', 'iptables-save.txt'), await nsRun(ns, ['iptables-nft-save', '-c']));
  writeFileSync(
    join(OUT, 'userspace-matrix', 'facts.yaml'),
    `# userspace mode's portals are iptables rules; the node's own address is where a REDIRECT lands.\nmode: userspace\nnodeIPs: [${NODE_A.ip}]\n`,
  );
  await cluster.kproxy.stop();
  process.stdout.write(`recorded into ${OUT}\n`);
} finally {
  await cluster.destroy();
}
