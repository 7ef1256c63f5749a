import { join } from 'node:path';
import { describeGoldenCases } from '../golden.ts';
import { iptablesGolden } from './golden.ts';

/**
 * Golden cases (../golden.ts runs them): testdata/<case>/input.yaml holds
 * Services, EndpointSlices, a Node and optionally a GoldenOptions document
 * (IptablesGoldenOptions); expected.rules is the filter and nat tables as the
 * simulated kernel holds them after one full sync. UPDATE_GOLDEN=1 rewrites
 * expected.rules; by default they are compared.
 */
describeGoldenCases('iptables golden cases', iptablesGolden(), { testdata: join(import.meta.dirname, 'testdata'), atLeast: 11 });
