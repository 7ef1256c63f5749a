import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import type { ProxyConfig } from '../config/types.ts';
import type { InterfaceAddress } from '../kernel/netif.ts';
import { isLoopbackIP, type IPFamily } from '../net/ip.ts';
import type { Backend, BackendSyncResult } from './backend.ts';
import type { ProxyState } from './proxy-state.ts';
import { objectsFromYaml, stateFromObjects } from './testing.ts';

/**
 * The golden-case runner every mode's golden tests share. A case is a folder
 * of the mode's testdata/: input.yaml holds Services, EndpointSlices, a Node
 * and optionally one `kind: GoldenOptions` document (the node and the
 * configuration the case runs with); the mode programs it with one full sync
 * over its simulated kernel, and what the kernel then holds, printed, must be
 * the case's expected file byte for byte. UPDATE_GOLDEN=1 rewrites the
 * expected files instead of comparing: review the diff before committing it.
 * What differs between the modes (their options, harness, kernel print and
 * expected file's name) is the mode's GoldenMode, in its folder's golden.ts.
 */

/** GoldenOptions is what every mode reads of a case's GoldenOptions document; a mode's own fields extend it. */
export interface GoldenOptions {
  /** nodeName: the node kproxy runs on (default node-a). */
  nodeName?: string;
  /** config: ProxyConfig fields to override (clusterCIDRs, nodePortAddresses, the mode's section...). */
  config?: Record<string, unknown>;
}

/** GoldenCase is a case's input.yaml as read: its options and, on demand, its objects in a ProxyState. */
export interface GoldenCase<O extends GoldenOptions = GoldenOptions> {
  readonly inputPath: string;
  /** options: the case's GoldenOptions document ({} without one; the last one when there are several). */
  readonly options: O;
  /** nodeName: options.nodeName or node-a. */
  readonly nodeName: string;
  /** config: options.config, for the mode's configuration builder. */
  readonly config: Partial<ProxyConfig>;
  /** state builds a fresh ProxyState of the family from the case's objects, its sources synced (each call parses them anew). */
  state(family?: IPFamily): ProxyState;
}

/** GoldenRun is one case programmed: the harness it went through, the full sync's result and what the kernel holds. */
export interface GoldenRun<H> {
  readonly harness: H;
  readonly result: BackendSyncResult;
  /** output: what the simulated kernel holds after the full sync, as the case's expected file holds it. */
  readonly output: string;
}

/** GoldenMode is what a mode feeds the runner: the name of its expected files and how it programs a case. */
export interface GoldenMode<O extends GoldenOptions, R extends GoldenRun<unknown>> {
  /** expected: the file of each case folder the output is compared with ("expected.rules"). */
  readonly expected: string;
  /** program builds the mode's harness for the case, runs one full sync over its simulated kernel (fullSync) and prints it. */
  program(c: GoldenCase<O>): Promise<R>;
}

/** readGoldenCase reads a case's input.yaml. */
export function readGoldenCase<O extends GoldenOptions>(inputPath: string): GoldenCase<O> {
  const text = readFileSync(inputPath, 'utf8');
  let options = {} as O;
  for (const doc of parseAllDocuments(text)) {
    const js = doc.toJS() as { kind?: string } & O;
    if (js?.kind === 'GoldenOptions') options = js;
  }
  const nodeName = options.nodeName ?? 'node-a';
  return {
    inputPath,
    options,
    nodeName,
    config: (options.config ?? {}) as Partial<ProxyConfig>,
    state: (family) => stateFromObjects(nodeName, objectsFromYaml(inputPath, text), undefined, family),
  };
}

/** runGoldenCase programs the case of inputPath (a testdata/<case>/input.yaml) through the mode. */
export function runGoldenCase<O extends GoldenOptions, R extends GoldenRun<unknown>>(mode: GoldenMode<O, R>, inputPath: string): Promise<R> {
  return mode.program(readGoldenCase<O>(inputPath));
}

/** fullSync runs one full sync of the state through the backend and throws the sync's error. */
export async function fullSync(backend: Backend, state: ProxyState): Promise<BackendSyncResult> {
  const result = await backend.sync({ state: state.checkout(), forceFull: true });
  if (result.error) throw result.error;
  return result;
}

/** hostAddresses turns a case's addresses into the node's interfaces: loopback ones on lo, the others on eth0 (/24, /64). */
export function hostAddresses(addresses: readonly string[]): InterfaceAddress[] {
  return addresses.map((a): InterfaceAddress => ({
    ifname: isLoopbackIP(a) ? 'lo' : 'eth0',
    family: a.includes(':') ? 'IPv6' : 'IPv4',
    address: a,
    prefixLength: a.includes(':') ? 64 : 24,
  }));
}

/** goldenCases lists the cases of a testdata folder: its folders holding an input.yaml, sorted. */
export function goldenCases(testdata: string): string[] {
  return readdirSync(testdata, { withFileTypes: true })
    .filter((d) => d.isDirectory() && existsSync(join(testdata, d.name, 'input.yaml')))
    .map((d) => d.name)
    .sort();
}

/**
 * describeGoldenCases is a mode's golden suite: at least `atLeast` cases in
 * testdata, and one test per case that programs it and compares the output
 * with its expected file (or, with UPDATE_GOLDEN=1, writes the file first).
 */
export function describeGoldenCases<O extends GoldenOptions, R extends GoldenRun<unknown>>(title: string, mode: GoldenMode<O, R>, opts: { readonly testdata: string; readonly atLeast: number }): void {
  const update = process.env.UPDATE_GOLDEN === '1';
  const cases = goldenCases(opts.testdata);
  describe(title, () => {
    it('has cases', () => {
      expect(cases.length).toBeGreaterThanOrEqual(opts.atLeast);
    });

    for (const name of cases) {
      it(`programs ${name} exactly as ${mode.expected}`, async () => {
        const dir = join(opts.testdata, name);
        const { output } = await runGoldenCase(mode, join(dir, 'input.yaml'));
        const expectedPath = join(dir, mode.expected);
        if (update) writeFileSync(expectedPath, output);
        expect(existsSync(expectedPath), `${expectedPath} is missing: run with UPDATE_GOLDEN=1 and review it`).toBe(true);
        expect(output).toBe(readFileSync(expectedPath, 'utf8'));
      });
    }
  });
}
