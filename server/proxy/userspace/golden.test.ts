import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runGoldenCase } from './golden.ts';

/**
 * Golden cases: testdata/<case>/input.yaml holds Services, EndpointSlices, a
 * Node and optionally a GoldenOptions document; expected.rules is the filter
 * and nat tables as the simulated kernel holds them after one full sync, then
 * the proxy sockets with their rotations and the ports held for them.
 * UPDATE_GOLDEN=1 rewrites expected.rules; by default they are compared.
 */
const TESTDATA = join(import.meta.dirname, 'testdata');
const UPDATE = process.env.UPDATE_GOLDEN === '1';
const cases = readdirSync(TESTDATA, { withFileTypes: true })
  .filter((d) => d.isDirectory() && existsSync(join(TESTDATA, d.name, 'input.yaml')))
  .map((d) => d.name)
  .sort();

describe('userspace golden cases', () => {
  it('has cases', () => {
    expect(cases.length).toBeGreaterThanOrEqual(10);
  });

  for (const name of cases) {
    it(`programs ${name} exactly as expected.rules`, async () => {
      const dir = join(TESTDATA, name);
      const { output } = await runGoldenCase(join(dir, 'input.yaml'));
      const expectedPath = join(dir, 'expected.rules');
      if (UPDATE) writeFileSync(expectedPath, output);
      expect(existsSync(expectedPath), `${expectedPath} is missing: run with UPDATE_GOLDEN=1 and review it`).toBe(true);
      expect(output).toBe(readFileSync(expectedPath, 'utf8'));
    });
  }
});
