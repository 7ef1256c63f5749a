import { join } from 'node:path';
import { describeGoldenCases } from '../golden.ts';
import { userspaceGolden } from './golden.ts';

/**
 * Golden cases (../golden.ts runs them): testdata/<case>/input.yaml holds
 * Services, EndpointSlices, a Node and optionally a GoldenOptions document
 * (UserspaceGoldenOptions); expected.rules is the filter and nat tables as the
 * simulated kernel holds them after one full sync, then the proxy sockets
 * with their rotations and the ports held for them. UPDATE_GOLDEN=1 rewrites
 * expected.rules; by default they are compared.
 */
describeGoldenCases('userspace golden cases', userspaceGolden, { testdata: join(import.meta.dirname, 'testdata'), atLeast: 10 });
