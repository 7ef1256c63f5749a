/**
 * coldstart-ab compares the cold start of two builds of kproxy in one run,
 * alternating them run by run so that a busy machine weighs on both alike:
 *   node test/bench/coldstart-ab.ts [--reps N] BASE_CLI [CLI]
 * (CLI defaults to this checkout's dist/server/cli.js; another checkout's
 * build is its dist/server/cli.js). Each repetition starts each build once per
 * iptables flavour and source, exactly as `--only coldstart` does
 * (coldstart.ts, 10,000 × 2, the same manifest and fake API server), and the
 * medians of each phase are printed as a Markdown table, then as JSON. Root,
 * as every namespace benchmark.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { generateCluster, POD_CIDR } from './cluster.ts';
import { coldStartRun, writeYamlManifest, type ColdStart } from './coldstart.ts';
import { DIST_CLI, killAll } from './daemon.ts';
import { NODE_NAME } from './full-sync.ts';
import type { Flavor } from './replay.ts';
import type { Size } from './results.ts';

const NODE_IP = '10.250.0.2';
const { values, positionals } = parseArgs({ options: { reps: { type: 'string', default: '3' } }, allowPositionals: true });
if (positionals.length < 1) throw new Error('usage: coldstart-ab.ts [--reps N] BASE_CLI [CLI]');
const builds = { base: positionals[0], this: positionals[1] ?? DIST_CLI };
const size: Size = { services: 10_000, endpoints: 2 };
const scratch = mkdtempSync(join(tmpdir(), 'kproxy-coldstart-ab-'));
process.on('SIGINT', () => {
  killAll();
  process.exit(130);
});

const PHASES = ['totalMs', 'startMs', 'readMs', 'buildMs', 'kernelMs'] as const;
const runs = new Map<string, ColdStart[]>();
try {
  const manifest = writeYamlManifest(generateCluster({ services: size.services, endpointsPerService: size.endpoints, nodeName: NODE_NAME, nodeIP: NODE_IP }), join(scratch, 'm'));
  for (let rep = 0; rep < Number(values.reps); rep++) {
    for (const flavor of ['legacy', 'nft'] as Flavor[]) {
      for (const source of ['file', 'api'] as const) {
        for (const [name, entry] of Object.entries(builds)) {
          const r = await coldStartRun({ size, flavor, clusterCIDR: POD_CIDR, nodeIP: NODE_IP, entry, ...(source === 'file' ? { manifest } : {}) });
          const key = `${flavor} ${source} ${name}`;
          runs.set(key, [...(runs.get(key) ?? []), r]);
          process.stderr.write(
            `${key}: ${Math.round(r.totalMs)} ms (start ${Math.round(r.startMs)}, read ${Math.round(r.readMs)}, build ${Math.round(r.buildMs)}, kernel ${Math.round(r.kernelMs)})\n`,
          );
        }
      }
    }
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const table = [...runs].map(([key, rs]) => ({ key, runs: rs.length, ...Object.fromEntries(PHASES.map((p) => [p, Math.round(median(rs.map((r) => r[p])))])) }));
console.log(`| flavour, source, build | runs | ${PHASES.join(' | ')} |\n| --- | --- | ${PHASES.map(() => '---').join(' | ')} |`);
for (const row of table) console.log(`| ${row.key} | ${row.runs} | ${PHASES.map((p) => (row as Record<string, unknown>)[p]).join(' | ')} |`);
console.log(JSON.stringify({ builds, table }));
