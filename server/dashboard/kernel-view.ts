import type { PackedText } from './packed-text.ts';
import type { IPFamily } from '../net/ip.ts';
import type { BackendSyncResult } from '../proxy/backend.ts';
import type { Endpoint } from '../proxy/endpoint.ts';
import type { ServicePort } from '../proxy/service-port.ts';
import type { SyncRecord } from '../proxy/sync-loop.ts';
import type { CategorizedEndpoints } from '../proxy/topology.ts';
import type { ConnectionsPage, FlowEntry, KernelKind, RealServerFacts, RelayPortFacts, RelayTotals, VirtualServerFacts } from './protocol.ts';

/**
 * The kernel view: how a backend shows the dashboard what it programmed and
 * what the kernel holds. Every mode fits one shape, tables → chains → rules:
 *
 *   iptables   table "nat"   chain "KUBE-SVC-…"          rule "-m statistic … -j KUBE-SEP-…"
 *   ipvs       table "ipvs"  chain "TCP 10.96.0.10:80"   rule "-> 10.244.1.5:8080 Masq weight 1"
 *              table "ipsets" chain "KUBE-CLUSTER-IP"    rule "10.96.0.10,tcp:80"
 *              table "addresses" chain "kube-ipvs0"      rule "10.96.0.10/32"
 *
 * with packet and byte counters where the kernel keeps them. The Rules page,
 * drift, the Service page and the live counters work on this shape alone; a
 * backend contributes a KernelViewProvider (README.md in this folder).
 */

/** KernelRule is one rule (or real server, set member) as the kernel lists it. */
export interface KernelRule {
  /** spec: the rule as listed, without its chain ("-d 10.96.0.10/32 -p tcp … -j KUBE-SVC-…"). */
  readonly spec: string;
  /** target: the chain (or object) it leads to, for jump links; null when none. */
  readonly target: string | null;
  readonly packets: number;
  readonly bytes: number;
  /** ipvs: a real server's weight, connections and traffic (table "ipvs"). */
  readonly ipvs?: RealServerFacts;
}

export interface KernelChain {
  readonly name: string;
  readonly builtin: boolean;
  /** policy: ACCEPT/DROP for built-in chains; null for user chains (or a scheduler, for IPVS). */
  readonly policy: string | null;
  readonly packets: number;
  readonly bytes: number;
  /**
   * rules: in order. A chain may keep its rules compactly and build these
   * objects when asked (iptables' RuleStore): read rules.length through
   * ruleCountOf, and take the array once for a walk rather than per rule.
   */
  readonly rules: readonly KernelRule[];
  /** ruleCount: rules.length, where counting is cheaper than building the rules. */
  readonly ruleCount?: number;
  /**
   * specAt (optional): rules[i].spec, where reading it is cheaper than building
   * the rules (a search over every rule). A provider whose chains offer it keys
   * rules by their spec alone (ruleKey): drift compares them spec by spec.
   */
  specAt?(i: number): string;
  /**
   * specsHash (optional): a hash of the rules' specs in order, where the chain
   * computes it without building them; drift skips chains whose specs, on both
   * sides, hash as they did when they last compared equal.
   */
  specsHash?(): number;
  /** ipvs: a virtual server's scheduler, connections and traffic (table "ipvs"). */
  readonly ipvs?: VirtualServerFacts;
}

/** KernelTable keeps chains in listing order. */
export interface KernelTable {
  readonly name: string;
  readonly chains: KernelChains;
}

/**
 * KernelChains: a table's chains by name. A provider that keeps them compactly
 * (iptables' ChainTable: a view made per lookup) also counts their rules
 * without a chain object each (ruleTotal): 130,000 views in one go held the
 * event loop 25 ms at 10,000 × 10 for a sum.
 */
export interface KernelChains extends ReadonlyMap<string, KernelChain> {
  ruleTotal?(): number;
}

/** KernelTables is one copy of kernel state (or of what kproxy wrote). */
export interface KernelTables {
  readonly tables: ReadonlyMap<string, KernelTable>;
  readonly chainCount: number;
  readonly ruleCount: number;
}

/** OwnedChain is a kernel object a service port owns, with what it does for it. */
export interface OwnedChain {
  readonly table: string;
  readonly chain: string;
  /** role: "service", "local", "external", "firewall", "endpoint", "entry" (iptables); "cluster-ip", "node-port", "external-ip", "load-balancer-ip" (IPVS virtual servers). */
  readonly role: string;
}

/** ServicePortObjects is what one service port became in the kernel. */
export interface ServicePortObjects {
  /** owned: its own chains, in the order a packet meets them. */
  readonly owned: readonly OwnedChain[];
  /**
   * entryChains: shared chains holding rules that lead into it (KUBE-SERVICES,
   * KUBE-NODEPORTS…); its rules there are picked with isEntryRule.
   */
  readonly entryChains: readonly { readonly table: string; readonly chain: string }[];
  isEntryRule(rule: KernelRule): boolean;
  /** flows: each way into the port, with the objects on its path. */
  readonly flows: readonly FlowEntry[];
  /** endpointObject: the object one endpoint ("ip:port") is reached through. */
  endpointObject(endpointKey: string): string | null;
}

/** RequiredRule is a rule outside kproxy's own chains that must exist (a jump from a built-in chain). */
export interface RequiredRule {
  readonly table: string;
  readonly chain: string;
  readonly spec: string;
}

/** RestoreInput is one downloadable input kproxy sent to the kernel. */
export interface RestoreInput {
  readonly seq: number;
  readonly at: number;
  readonly full: boolean;
  /** body: the input, deflated while nobody downloads it (a full one at 10,000 × 10 is 33 MB of text). */
  readonly body: PackedText;
  readonly error?: string;
}

/**
 * KernelViewProvider is a backend's part of the dashboard. Everything but
 * read(), intended() and formatIntended() is cheap and synchronous; those
 * three may take long on a big node and must yield to the event loop while
 * they work.
 */
export interface KernelViewProvider {
  readonly kind: KernelKind;
  /** simulated: the kernel is kproxy's simulated kernel (--dry-run). */
  readonly simulated: boolean;
  /** read lists what the kernel holds now, with counters. The dashboard rate-limits calls. */
  read(): Promise<KernelTables>;
  /** intended returns what kproxy believes it programmed (its own objects only), or null before the first sync. */
  intended(): Promise<KernelTables | null>;
  /** intendedVersion changes whenever intended() would answer differently (the sync seq that last changed it). */
  intendedVersion(): number;
  /** noteSync is called after every sync; keep references only (it runs on the sync's path). */
  noteSync(record: SyncRecord, result: BackendSyncResult): void;
  /** noteCleanup: kproxy removed all its objects; intended() is empty until the next sync. */
  noteCleanup(): void;
  /** release drops what intended() built (nobody has looked for a while); the next call builds it again. */
  release(): void;
  /** holdsIntended: what intended() built is in memory (views that build nothing leave it out). */
  readonly holdsIntended?: boolean;
  /** ruleKey makes a listed rule and the written one compare equal when the kernel means the same thing. */
  ruleKey(table: string, rule: KernelRule): string;
  /** ownsChain: the name is in kproxy's namespace, so a chain kproxy did not write is drift. */
  ownsChain(table: string, chain: string): boolean;
  /** requiredRules: rules in chains kproxy does not own that must exist (jumps from built-in chains). */
  requiredRules(): readonly RequiredRule[];
  /**
   * settingsKey (optional): a normal form of a chain's own settings where kproxy chooses them (an IPVS
   * virtual server's scheduler and persistence, a set's type); a chain whose key differs from the written
   * one is drift. null, or no method: the chain has no such settings.
   */
  settingsKey?(table: string, chain: KernelChain): string | null;
  /** servicePort describes one service port's objects and flows. */
  servicePort(sp: ServicePort, endpoints: readonly Endpoint[], categorized: CategorizedEndpoints): ServicePortObjects;
  /** lastInput / lastFailedInput: the last input the kernel accepted, and the last it refused (of one IP family, where the view has several). */
  lastInput(family?: IPFamily): RestoreInput | null;
  lastFailedInput(family?: IPFamily): RestoreInput | null;
  /**
   * formatIntended renders intended() as a downloadable file (iptables-restore
   * text…), yielding as it goes; the file is the pieces in order, sent one by one.
   */
  formatIntended(tables: KernelTables): Promise<string[]>;
  /**
   * liveIntervalMs (optional): how often watching dashboards get counters when
   * the mode has figures that move faster than the kernel's (the relay's
   * connections); the default is 5 s.
   */
  readonly liveIntervalMs?: number;
  /** relayPort (userspace mode): a service port's proxy sockets and live figures; null when it has none. */
  relayPort?(sp: ServicePort): RelayPortFacts | null;
  /** relayTotals (userspace mode): the relay's node-wide figures. */
  relayTotals?(): RelayTotals;
  /** connections (userspace mode): the open connections matching q (a substring of service, client or endpoint), paged. */
  connections?(query: ConnectionsQuery): ConnectionsPage;
}

/** ConnectionsQuery selects open connections: a search and a page. */
export interface ConnectionsQuery {
  readonly q: string;
  readonly offset: number;
  readonly limit: number;
}

/** kernelTables counts the chains and rules of a set of tables. */
export function kernelTables(tables: ReadonlyMap<string, KernelTable>): KernelTables {
  let chainCount = 0;
  let ruleCount = 0;
  for (const t of tables.values()) {
    chainCount += t.chains.size;
    ruleCount += tableRuleCount(t);
  }
  return { tables, chainCount, ruleCount };
}

/** tableRuleCount: how many rules a table's chains hold, from the chains' own total where they keep one. */
export function tableRuleCount(t: KernelTable): number {
  if (t.chains.ruleTotal) return t.chains.ruleTotal();
  let n = 0;
  for (const c of t.chains.values()) n += ruleCountOf(c);
  return n;
}

/** specAtOf: the spec of a chain's rule i, without building the chain's rules where the chain can. */
export function specAtOf(c: KernelChain, i: number): string {
  return c.specAt ? c.specAt(i) : c.rules[i]!.spec;
}

/** ruleCountOf: how many rules a chain holds, without building them. */
export function ruleCountOf(c: KernelChain): number {
  return c.ruleCount ?? c.rules.length;
}
