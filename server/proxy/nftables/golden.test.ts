import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runNftGoldenCase } from './golden.ts';

/**
 * Golden cases: testdata/<case>/input.yaml holds Services, EndpointSlices, a
 * Node and optionally a GoldenOptions document; expected.nft is the kube-proxy
 * table as the simulated kernel lists it after one full sync, written as
 * `nft -f` input. UPDATE_GOLDEN=1 rewrites expected.nft; by default it is compared.
 */
const TESTDATA = join(import.meta.dirname, 'testdata');
const UPDATE = process.env.UPDATE_GOLDEN === '1';
const cases = readdirSync(TESTDATA, { withFileTypes: true })
  .filter((d) => d.isDirectory() && existsSync(join(TESTDATA, d.name, 'input.yaml')))
  .map((d) => d.name)
  .sort();

describe('nftables golden cases', () => {
  it('has cases', () => {
    expect(cases.length).toBeGreaterThan(10);
  });

  for (const name of cases) {
    it(`programs ${name} exactly as expected.nft`, async () => {
      const dir = join(TESTDATA, name);
      const { table } = await runNftGoldenCase(join(dir, 'input.yaml'));
      const expectedPath = join(dir, 'expected.nft');
      if (UPDATE) writeFileSync(expectedPath, table);
      expect(existsSync(expectedPath), `${expectedPath} is missing: run with UPDATE_GOLDEN=1 and review it`).toBe(true);
      expect(table).toBe(readFileSync(expectedPath, 'utf8'));
    });
  }
});
