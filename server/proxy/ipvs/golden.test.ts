import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runGoldenCase } from './golden.ts';

/**
 * Golden cases: testdata/<case>/input.yaml holds Services, EndpointSlices, a
 * Node and optionally a GoldenOptions document; expected.txt is what the fake
 * kernel holds after one full sync: `ipvsadm -Sn`, `ipset save`, the addresses
 * on kube-ipvs0 and the nat and filter tables. UPDATE_GOLDEN=1 rewrites them.
 */
const TESTDATA = join(import.meta.dirname, 'testdata');
const UPDATE = process.env.UPDATE_GOLDEN === '1';
const cases = readdirSync(TESTDATA, { withFileTypes: true })
  .filter((d) => d.isDirectory() && existsSync(join(TESTDATA, d.name, 'input.yaml')))
  .map((d) => d.name)
  .sort();

describe('IPVS golden cases', () => {
  it('has cases', () => {
    expect(cases.length).toBeGreaterThan(10);
  });

  for (const name of cases) {
    it(`programs ${name} exactly as expected.txt`, async () => {
      const dir = join(TESTDATA, name);
      const { kernel } = await runGoldenCase(join(dir, 'input.yaml'));
      const expectedPath = join(dir, 'expected.txt');
      if (UPDATE) writeFileSync(expectedPath, kernel);
      expect(existsSync(expectedPath), `${expectedPath} is missing: run with UPDATE_GOLDEN=1 and review it`).toBe(true);
      expect(kernel).toBe(readFileSync(expectedPath, 'utf8'));
    });
  }
});
