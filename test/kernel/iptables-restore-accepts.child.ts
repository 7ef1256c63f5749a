/**
 * Runs inside a test network namespace (ip netns exec NS node this-file FLAVOR [RULES_PER_COMMIT]):
 * programs deploy/examples/ with the real iptables runner of the given flavour,
 * then a partial sync, then a sync the kernel must refuse, then --cleanup, and
 * prints one JSON report with iptables-save snapshots after each step.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { realClock } from '../../server/clock.ts';
import { createIptablesRunner, type IptablesFlavor } from '../../server/kernel/iptables.ts';
import { hostInterfaces } from '../../server/kernel/netif.ts';
import { procSysctl } from '../../server/kernel/sysctl.ts';
import { createLogger } from '../../server/log.ts';
import { cleanupIptables } from '../../server/proxy/xtables/cleanup.ts';
import { createIptablesBackend } from '../../server/proxy/iptables/proxier.ts';
import { testConfig } from '../../server/proxy/iptables/testing.ts';
import type { EndpointSlice } from '../../server/proxy/kube-objects.ts';
import { objectsFromYaml, stateFromObjects } from '../../server/proxy/testing.ts';

const flavor = process.argv[2] as IptablesFlavor;
// rulesPerCommit (optional): split big nat rewrites into several COMMITs, as kproxy does for nft.
const rulesPerCommit = process.argv[3] ? Number(process.argv[3]) : undefined;
const root = join(import.meta.dirname, '../..');
const examples = join(root, 'deploy/examples');
const objects = readdirSync(examples)
  .filter((f) => /\.ya?ml$/.test(f))
  .sort()
  .flatMap((f) => objectsFromYaml(f, readFileSync(join(examples, f), 'utf8')));
const state = stateFromObjects('node-a', objects);
const save = (table?: string) => execFileSync(`iptables-${flavor}-save`, table ? ['-t', table] : [], { encoding: 'utf8' });

const runner = await createIptablesRunner({ family: 'IPv4', flavor });
const logs: string[] = [];
const backend = createIptablesBackend({
  config: testConfig({ clusterCIDRs: ['10.244.0.0/16'] }),
  nodeName: 'node-a',
  family: 'IPv4',
  runner,
  netif: hostInterfaces(),
  sysctl: procSysctl(),
  clock: realClock,
  logger: createLogger({ level: 'debug', write: (l) => logs.push(l) }),
  ...(rulesPerCommit ? { rulesPerCommit } : {}),
});
await backend.init!();
const brief = (r: Awaited<ReturnType<typeof backend.sync>>) => ({ full: r.full, error: r.error?.message ?? null, lines: r.linesWritten, batch: r.batch ?? '' });

const full = brief(await backend.sync({ state: state.checkout(), forceFull: true }));
const afterFull = save();

// A partial sync: one EndpointSlice goes away, so its service loses its endpoint chains.
const slice = objects.find((o) => o.kind === 'EndpointSlice' && o.metadata?.namespace === 'shop' && o.metadata?.name?.startsWith('api-')) as EndpointSlice;
state.onEndpointSlice(slice, null);
const partial = brief(await backend.sync({ state: state.checkout(), forceFull: false }));
const afterPartial = save();

// A sync the kernel refuses: a foreign rule holds on to an endpoint chain that must be deleted.
const sep = afterPartial
  .split('\n')
  .find((l) => l.startsWith(':KUBE-SEP-'))!
  .slice(1)
  .split(' ')[0];
execFileSync(`iptables-${flavor}`, ['-t', 'nat', '-N', 'KPT-HOLDER']);
execFileSync(`iptables-${flavor}`, ['-t', 'nat', '-A', 'KPT-HOLDER', '-j', sep]);
const natBefore = save('nat');
const owner = objects
  .filter((o) => o.kind === 'EndpointSlice')
  .find((o) => {
    const s = o as EndpointSlice;
    return afterPartial.split('\n').some((l) => l.startsWith(`-A ${sep} `) && s.endpoints?.some((e) => l.includes(`--to-destination ${e.addresses?.[0]}:`)));
  }) as EndpointSlice;
state.onEndpointSlice(owner, null);
const refused = brief(await backend.sync({ state: state.checkout(), forceFull: false }));
const natAfterRefused = save('nat');
execFileSync(`iptables-${flavor}`, ['-t', 'nat', '-F', 'KPT-HOLDER']);
execFileSync(`iptables-${flavor}`, ['-t', 'nat', '-X', 'KPT-HOLDER']);
const recovered = brief(await backend.sync({ state: state.checkout(), forceFull: false }));
const afterRecovered = save();

const cleanup = await cleanupIptables({ runners: [runner], logger: createLogger({ write: () => {} }) });
const afterCleanup = save();
const cleanupAgain = await cleanupIptables({ runners: [runner], logger: createLogger({ write: () => {} }) });

process.stdout.write(
  JSON.stringify({
    full,
    afterFull,
    partial,
    afterPartial,
    sep,
    refused,
    natBefore,
    natAfterRefused,
    recovered,
    afterRecovered,
    cleanup: { removed: cleanup.removed, errors: cleanup.errors.map((e) => e.message) },
    cleanupAgain: { removed: cleanupAgain.removed, errors: cleanupAgain.errors.map((e) => e.message) },
    afterCleanup,
    logs,
  }),
);
